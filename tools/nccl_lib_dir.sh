#!/usr/bin/env bash
# Prints the directory of PyTorch's bundled NCCL (the one holding libnccl.so.2), for gpu/nccl_lib's
# run-time loading on the GPU machine; prints nothing when there is none.
d=$(python3 -c 'import os, nvidia.nccl as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null)
[[ -n "$d" && -f "$d/libnccl.so.2" ]] && echo "$d"
exit 0

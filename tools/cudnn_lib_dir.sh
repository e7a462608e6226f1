#!/usr/bin/env bash
# Prints the directory of PyTorch's bundled cuDNN (the one holding libcudnn_graph.so.9), for
# ops/cuda/cudnn_attention's run-time loading on the GPU machine; prints nothing when there is none.
d=$(python3 -c 'import os, nvidia.cudnn as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null)
[[ -n "$d" && -f "$d/libcudnn_graph.so.9" ]] && echo "$d"
exit 0

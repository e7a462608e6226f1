#!/usr/bin/env bash
# Prints the directory of PyTorch's bundled cuDNN (the one holding libcudnn_graph.so.9), for
# ops/cuda/cudnn_attention's run-time loading on the GPU machine; prints nothing when there is none.
# Asks $HYDRA_TORCH_PYTHON, then python3, then the GPU machine's PyTorch venv (/opt/torch/.venv), whose
# nvidia-cudnn wheel the plain python3 may not see.
for py in "${HYDRA_TORCH_PYTHON:-}" python3 /opt/torch/.venv/bin/python; do
  [[ -n "$py" ]] && command -v "$py" >/dev/null 2>&1 || continue
  d=$("$py" -c 'import os, nvidia.cudnn as m; print(os.path.join(list(m.__path__)[0], "lib"))' 2>/dev/null)
  [[ -n "$d" && -f "$d/libcudnn_graph.so.9" ]] && { echo "$d"; exit 0; }
done
exit 0

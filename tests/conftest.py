import os

import torch

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# every fast kernel call checks its argument types (grammars/fastcall.py)
os.environ.setdefault("RADIXGEN_CHECK_KERNEL_TYPES", "1")
# Without a GPU the Triton kernels run in Triton's interpreter, which must be chosen before they
# are defined (before kernels.triton_ops is first imported, by any test).
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

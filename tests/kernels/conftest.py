import os

import torch

# Without a GPU the kernels run in Triton's interpreter, which must be chosen before they are
# defined (that is, before kernels.triton_ops is imported).
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

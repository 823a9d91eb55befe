"""Neural-network building blocks (tk.nn.functional holds the functional forms)."""
from . import functional  # noqa: F401
from . import init  # noqa: F401
from . import parallel  # noqa: F401
from .modules import *  # noqa: F401,F403
from .modules import __all__  # noqa: F401
from .parallel import SyncBatchNorm  # noqa: F401,E402  (torch.nn.SyncBatchNorm's place)

__all__ = __all__ + ["SyncBatchNorm"]

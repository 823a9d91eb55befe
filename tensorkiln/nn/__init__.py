"""Neural-network building blocks (tk.nn.functional holds the functional forms)."""
from . import functional  # noqa: F401

"""tensorkiln's version, in one place: `tk.__version__`, and what an exported model's manifest records."""
__version__ = "0.1.0"

"""The compile pipeline: named stages (stages.py) over one frozen options object (options.py),
ending in a CompiledGraph (executable.py)."""

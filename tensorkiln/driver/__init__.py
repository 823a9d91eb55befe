"""The compile driver: the pipeline of named stages (stages.py) over one frozen options object
(options.py), ending in a CompiledGraph (executable.py)."""

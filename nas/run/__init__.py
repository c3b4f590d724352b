"""nas.run: the run-folder machinery that ``nas-search`` and ``nas-train`` share.

Everything a run needs around its loop, whichever stage it is: the exclusive lock on the run
folder (``lock``), the check that a resumed run is the run that was stopped (``resume``), the
stop requests of SIGTERM and Ctrl-C (``signals``), and the one-line report of a run folder that
cannot be written (``disk``). Nothing here imports torch, so the command-line wrappers use it
before the heavy imports.
"""

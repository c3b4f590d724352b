"""nas.run: the run skeleton and run-folder machinery that ``nas-search`` and ``nas-train`` share.

Everything a run needs around its loop, whichever stage it is, written once:

* ``skeleton``: ``Run``, the frame of a run (device, precision, resume guard, stop flag with its
  one collective per step, RNG restore, progress, ``run()``), and ``autocast`` / ``to_device``;
* ``checkpoint``: the ``Checkpointer`` of a run's registered stateful objects, checkpoint
  files and RNG states;
* ``schedules``: the learning-rate schedules of search and retraining, the drop-path ramp;
* ``seeds``: every seed stream of a run, named;
* ``resume``: the check that a resumed run is the run that was stopped;
* ``lock``, ``folder``: the exclusive lock on the run folder;
* ``signals``: the stop requests of SIGTERM and Ctrl-C;
* ``disk``: the one atomic write, and the one-line report of a folder that cannot be written;
* ``config``: the checks of a config that the command line runs before anything heavy.

``config``, ``disk``, ``folder``, ``lock``, ``resume`` and ``signals`` import no torch, so the
command-line wrappers use them before the heavy imports; this package imports no submodule.
"""

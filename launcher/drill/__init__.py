"""Fault-tolerance drills: faults as data (:mod:`.faults`), injected into a running attempt
(:mod:`.injector`, :mod:`.corrupt`, :mod:`.coordinator_loss`, :mod:`.partition`, hosts lost
and healed: :mod:`.host_loss`; a Slurm node's in the engine), scenarios from a drill file
(:mod:`.suite`), each run and judged (:mod:`.session`, :mod:`.verdict`, :mod:`.figures`), and the
report (:mod:`.report`, :mod:`.plot`). :mod:`.drive` is ``tfcluster drill``."""

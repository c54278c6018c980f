"""The platform's control stages, one module per stage: ``register``, ``gate``, ``deploy``,
``approval`` and ``cleanup``. Each is a function of the release (``context.ReleaseRun``: the
run, its reference, and the typed ``shared.pipelines.Release`` of the pipeline version it
runs) and the ports it needs (the pool, the registry's object storage), ending with the
stage's commit point (``stagectl.recording``). Admission, the attempt, the recorded outcome
and the node's completion are done once for every stage, in ``stagectl.work.StageWork``.
"""

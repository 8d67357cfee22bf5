r"""The batch engine: how a lane rewrites a leased partition, batch by batch.

- :mod:`.batch` — the one write path (:func:`~.batch.apply_batch`: transform,
  guarded bulk write, conflict re-reads);
- :mod:`.partition` — a leased partition: what a lane hands the engine
  (:class:`~.partition.PartitionContext`), the one fenced checkpoint of a written
  batch (:func:`~.partition.checkpoint_batch`), a dead lane's note, the error budget;
- :mod:`.pipeline` — update-pipeline batches: ``_id`` values read, one ``update_many``,
  failing documents isolated;
- :mod:`.work` — what a batch of each mode is (:class:`~.work.BatchWork`), the one
  call the watcher and dry runs write with (:func:`~.work.apply_work`), a plain batch;
- :mod:`.readahead` — plain batches with the next one read while this one is written;
- :mod:`.transactional` — a batch and its checkpoint in one transaction;
- :mod:`.steps` — ``mode: "step"`` migrations, run as checkpointed steps;
- :mod:`.worker` — the loop over one partition that picks among these.

What a lane waits for between batches is :mod:`migronaut_core.background.throttle`,
a layer below the runtime (which holds the throttles' shared state); the engine
sits above the runtime.
"""

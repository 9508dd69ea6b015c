"""What agentd keeps across restarts (``--state-dir``) and how replicas share the work.

In layer order (a module imports only those below it; docs/architecture.md):

* :mod:`agentd.state.resume`         a resumed session's subscriptions, taken up again at start.
* :mod:`agentd.state.conversations`  the conversations a ``--continue``/``--resume`` can name.
* :mod:`agentd.state.sessions`       the journals of one agentd: commit after each turn,
                                      restore at the next delivery, end with the session.
* :mod:`agentd.state.dir`            the state directory: layout, who may own it, its one-owner lock.
* :mod:`agentd.state.journal`        the session journal's file format: framed records,
                                      torn-tail detection, compaction (pure, no trio).
* :mod:`agentd.state.files`          how every state file is opened (no link, no FIFO wait, a read
                                      bound) and the one repair rule (moved aside or refused).
* :mod:`agentd.state.filelock`       the exclusive file lock and the directory fsync.
* :mod:`agentd.state.shard`          ``--shard INDEX/COUNT``: rendezvous hashing of shard keys.

Below models, upstream, watches and config (they read their files through
:mod:`agentd.state.files`). This package's ``__init__`` imports nothing.
"""

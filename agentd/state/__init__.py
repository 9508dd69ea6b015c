"""What agentd keeps across restarts (``--state-dir``) and how replicas share the work.

* :mod:`agentd.state.dir`        the state directory: layout, who may own it, its one-owner lock.
* :mod:`agentd.state.files`      how every state file is opened (no link, no FIFO wait, a read
                                  bound) and the one repair rule (moved aside or refused).
* :mod:`agentd.state.journal`    the session journal's file format: framed records,
                                  torn-tail detection, compaction (pure, no trio).
* :mod:`agentd.state.sessions`   the journals of one agentd: commit after each turn,
                                  restore at the next delivery, end with the session.
* :mod:`agentd.agent.transcript` transcript messages as data (frames, journal records).
* :mod:`agentd.state.shard`      ``--shard INDEX/COUNT``: rendezvous hashing of shard keys.

This package's ``__init__`` imports nothing: agent children import
:mod:`agentd.agent.transcript` and must not pay for the rest.
"""

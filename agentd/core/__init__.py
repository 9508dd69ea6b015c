"""The shared vocabulary of agentd: what every other package may import (the bottom layer).

In layer order (a module imports only those below it; docs/architecture.md):

* :mod:`agentd.core.errors`     the exception tree; each error knows its exit code.
* :mod:`agentd.core.exitcodes`  the one exit-code table and terminal statuses.
* :mod:`agentd.core.limits`     defaults a setting configures and a lower layer applies.
* :mod:`agentd.core.redact`     redaction: every error, event and label goes through it.
* :mod:`agentd.core.jsonvalue`  JSON values typed at the wire, narrowed before use.
* :mod:`agentd.core.safetext`   outside text made safe to encode and to show.
* :mod:`agentd.core.durations`  durations, sizes and numbers as people write them (numbers in ASCII digits only).
* :mod:`agentd.core.extras`     how to install an optional extra, for this installation.
* :mod:`agentd.core.prelaunch`  stdio servers started before the heavy imports, agentd's own forked after them.
* :mod:`agentd.core.hosts`      loopback, wildcard and the host of a ``Host`` header (the HTTP listeners).
* :mod:`agentd.core.heap`       glibc's mmap threshold fixed for a long run; start-up objects frozen.

This ``__init__`` imports nothing: ``agentd`` starts servers early through
:mod:`agentd.core.prelaunch` and must not pay for the rest.
"""

#!/usr/bin/env python3
"""Sort the tests by the part they test (rfcs/0360) and rewrite every reference to their paths.

A tool for issue 28 (item 4), kept so that the move can be re-run after other
branches land tests in the old folders (``tests/unit``, ``tests/integration``,
``tests/e2e``, ``tests/faults``). It is not part of agentd; nothing imports it.

    python scripts/retest.py [--root DIR] [--dry-run] [--no-format]

Run it from a clean work tree; it then:

1. ``git mv``-s every test module of :data:`MAPPING` whose old file exists; a
   module of an old folder that the table does not name is placed by its name
   (:data:`PREFIXES`, first match wins; ``test_guard_X`` is placed as
   ``test_X``); a name taken in the subject gets the suffix of its old folder
   (:data:`SUFFIXES`). The MCP servers written for the tests
   (``tests/servers/*.py``, ``tests/faults/servers/*.py``) go to
   ``tests/mcpservers/`` (``tests/servers/`` is the bundled servers' subject
   now). Each subject folder gets an empty ``__init__.py``, so that two modules
   of one name in two subjects are ``tests.a.test_x`` and ``tests.b.test_x``;
2. marks every module moved out of ``tests/faults/`` with ``pytest.mark.fault``
   (the fault catalog's leftover check in tests/conftest.py applies to that
   mark; ``pytest -m fault`` runs the catalog);
3. rewrites the references in :data:`REWRITE_ROOTS`: paths
   (``tests/e2e/test_modes.py``, ``tests/faults/servers/fault_server.py``) and
   dotted names (``tests.servers.helpers``);
4. sorts the imports and formats the Python files it changed (``ruff``);
5. reports: modules it could not place (add them to MAPPING or PREFIXES), and
   every line that still names an old folder (a form this script does not
   rewrite, or prose about the old layout: fix those by hand).

It is idempotent: a module already at its new place is skipped, a module
already marked ``fault`` is not marked again, and no new path begins with an
old one. Records under ``rfcs/`` (except their index) and CHANGELOG.md are
history and are left as they are.

Exit status: 0 when nothing is left to report, 1 when something is, 2 on a
usage error or a conflict (old and new both exist).
"""

from __future__ import annotations

import argparse
import ast
import re
import subprocess
import sys
from pathlib import Path

#: The subjects: one folder each under tests/, named after the part under test
#: (docs/architecture.md). Shown in docs/testing.md.
SUBJECTS: tuple[str, ...] = (
    "core",
    "observe",
    "state",
    "config",
    "cli",
    "models",
    "agent",
    "children",
    "routing",
    "watches",
    "upstream",
    "supervisor",
    "subagents",
    "servers",
    "packaging",
    "docs",
)

#: The folders sorted by how real a test is, emptied by this script.
OLD_FOLDERS: tuple[str, ...] = ("tests/unit", "tests/integration", "tests/e2e", "tests/faults")

#: Old path -> new path, for every test module of the old layout (as of the move).
MAPPING: dict[str, str] = {
    # unit
    "tests/unit/test_activity.py": "tests/observe/test_activity.py",
    "tests/unit/test_agent_loop.py": "tests/agent/test_agent_loop.py",
    "tests/unit/test_agents.py": "tests/supervisor/test_agents.py",
    "tests/unit/test_architecture.py": "tests/docs/test_architecture.py",
    "tests/unit/test_budget.py": "tests/supervisor/test_budget.py",
    "tests/unit/test_checkconnect.py": "tests/supervisor/test_checkconnect.py",
    "tests/unit/test_cli_options.py": "tests/cli/test_cli_options.py",
    "tests/unit/test_client_configs.py": "tests/config/test_client_configs.py",
    "tests/unit/test_config.py": "tests/config/test_config.py",
    "tests/unit/test_config_fuzz.py": "tests/config/test_config_fuzz.py",
    "tests/unit/test_config_package.py": "tests/config/test_config_package.py",
    "tests/unit/test_config_protocol.py": "tests/config/test_config_protocol.py",
    "tests/unit/test_config_servers.py": "tests/config/test_config_servers.py",
    "tests/unit/test_containerfile.py": "tests/packaging/test_containerfile.py",
    "tests/unit/test_conversations.py": "tests/state/test_conversations.py",
    "tests/unit/test_declared.py": "tests/routing/test_declared.py",
    "tests/unit/test_docs.py": "tests/docs/test_docs.py",
    "tests/unit/test_durations.py": "tests/core/test_durations.py",
    "tests/unit/test_eventlog.py": "tests/servers/test_eventlog.py",
    "tests/unit/test_examples_providers.py": "tests/docs/test_examples_providers.py",
    "tests/unit/test_files_core.py": "tests/servers/test_files_core.py",
    "tests/unit/test_glob.py": "tests/routing/test_glob.py",
    "tests/unit/test_governor.py": "tests/supervisor/test_governor.py",
    "tests/unit/test_guard_agents.py": "tests/supervisor/test_guard_agents.py",
    "tests/unit/test_guard_budget.py": "tests/supervisor/test_guard_budget.py",
    "tests/unit/test_guard_extract.py": "tests/watches/test_guard_extract.py",
    "tests/unit/test_guard_glob.py": "tests/routing/test_guard_glob.py",
    "tests/unit/test_guard_governor.py": "tests/supervisor/test_guard_governor.py",
    "tests/unit/test_guard_inboxlog.py": "tests/servers/test_guard_inboxlog.py",
    "tests/unit/test_guard_journal.py": "tests/state/test_guard_journal.py",
    "tests/unit/test_guard_mode.py": "tests/routing/test_guard_mode.py",
    "tests/unit/test_guard_notices.py": "tests/watches/test_guard_notices.py",
    "tests/unit/test_guard_redact.py": "tests/core/test_guard_redact.py",
    "tests/unit/test_guard_resolve.py": "tests/upstream/test_guard_resolve.py",
    "tests/unit/test_guard_router.py": "tests/routing/test_guard_router.py",
    "tests/unit/test_guard_sessions.py": "tests/state/test_guard_sessions.py",
    "tests/unit/test_guard_subscriptions.py": "tests/routing/test_guard_subscriptions.py",
    "tests/unit/test_guard_toolpolicy.py": "tests/supervisor/test_guard_toolpolicy.py",
    "tests/unit/test_humanlog.py": "tests/observe/test_humanlog.py",
    "tests/unit/test_inbox_log.py": "tests/servers/test_inbox_log.py",
    "tests/unit/test_inotify.py": "tests/servers/test_inotify.py",
    "tests/unit/test_jsonstream.py": "tests/servers/test_jsonstream.py",
    "tests/unit/test_jsonvalue.py": "tests/core/test_jsonvalue.py",
    "tests/unit/test_k8s_manifests.py": "tests/packaging/test_k8s_manifests.py",
    "tests/unit/test_k8s_webhooks.py": "tests/packaging/test_k8s_webhooks.py",
    "tests/unit/test_kube_core.py": "tests/servers/test_kube_core.py",
    "tests/unit/test_metrics_format.py": "tests/observe/test_metrics_format.py",
    "tests/unit/test_mode.py": "tests/routing/test_mode.py",
    "tests/unit/test_model_output.py": "tests/models/test_model_output.py",
    "tests/unit/test_models_factory.py": "tests/models/test_models_factory.py",
    "tests/unit/test_models_pricing.py": "tests/models/test_models_pricing.py",
    "tests/unit/test_models_rehearsal.py": "tests/models/test_models_rehearsal.py",
    "tests/unit/test_models_retry.py": "tests/models/test_models_retry.py",
    "tests/unit/test_models_script.py": "tests/models/test_models_script.py",
    "tests/unit/test_models_settings.py": "tests/models/test_models_settings.py",
    "tests/unit/test_models_shared_wire.py": "tests/models/test_models_shared_wire.py",
    "tests/unit/test_models_wire.py": "tests/models/test_models_wire.py",
    "tests/unit/test_once_imports.py": "tests/agent/test_once_imports.py",
    "tests/unit/test_output.py": "tests/observe/test_output.py",
    "tests/unit/test_packaging.py": "tests/packaging/test_packaging.py",
    "tests/unit/test_prelaunch.py": "tests/core/test_prelaunch.py",
    "tests/unit/test_protocol_doc.py": "tests/children/test_protocol_doc.py",
    "tests/unit/test_protocol_models.py": "tests/children/test_protocol_models.py",
    "tests/unit/test_reactor.py": "tests/supervisor/test_reactor.py",
    "tests/unit/test_reactor_parts.py": "tests/supervisor/test_reactor_parts.py",
    "tests/unit/test_redact.py": "tests/core/test_redact.py",
    "tests/unit/test_resubscribe_policy.py": "tests/upstream/test_resubscribe_policy.py",
    "tests/unit/test_rfcs.py": "tests/docs/test_rfcs.py",
    "tests/unit/test_router.py": "tests/routing/test_router.py",
    "tests/unit/test_router_stateful.py": "tests/routing/test_router_stateful.py",
    "tests/unit/test_routes_timer.py": "tests/routing/test_routes_timer.py",
    "tests/unit/test_safetext.py": "tests/core/test_safetext.py",
    "tests/unit/test_sandbox.py": "tests/watches/test_sandbox.py",
    "tests/unit/test_sdk_adapter.py": "tests/servers/test_sdk_adapter.py",
    "tests/unit/test_sdnotify.py": "tests/observe/test_sdnotify.py",
    "tests/unit/test_server_guards.py": "tests/servers/test_server_guards.py",
    "tests/unit/test_session_journals.py": "tests/state/test_session_journals.py",
    "tests/unit/test_sessionroutes.py": "tests/routing/test_sessionroutes.py",
    "tests/unit/test_state_files.py": "tests/state/test_state_files.py",
    "tests/unit/test_state_journal.py": "tests/state/test_state_journal.py",
    "tests/unit/test_status_access.py": "tests/observe/test_status_access.py",
    "tests/unit/test_subscriptions.py": "tests/routing/test_subscriptions.py",
    "tests/unit/test_thirdparty_pins.py": "tests/packaging/test_thirdparty_pins.py",
    "tests/unit/test_timeline.py": "tests/observe/test_timeline.py",
    "tests/unit/test_timer.py": "tests/routing/test_timer.py",
    "tests/unit/test_tool_content.py": "tests/agent/test_tool_content.py",
    "tests/unit/test_tool_policy.py": "tests/supervisor/test_tool_policy.py",
    "tests/unit/test_tracing_bounds.py": "tests/observe/test_tracing_bounds.py",
    "tests/unit/test_unmatched.py": "tests/routing/test_unmatched.py",
    "tests/unit/test_upstream_handshake_sdk.py": "tests/upstream/test_upstream_handshake_sdk.py",
    "tests/unit/test_upstream_http_detect.py": "tests/upstream/test_upstream_http_detect.py",
    "tests/unit/test_upstream_negotiate.py": "tests/upstream/test_upstream_negotiate.py",
    "tests/unit/test_upstream_tooluse.py": "tests/upstream/test_upstream_tooluse.py",
    "tests/unit/test_uriset.py": "tests/upstream/test_uriset.py",
    "tests/unit/test_vocabulary.py": "tests/observe/test_vocabulary.py",
    "tests/unit/test_watch_extract.py": "tests/watches/test_watch_extract.py",
    "tests/unit/test_watch_fuzz.py": "tests/watches/test_watch_fuzz.py",
    "tests/unit/test_watch_limits.py": "tests/watches/test_watch_limits.py",
    "tests/unit/test_watch_notices.py": "tests/watches/test_watch_notices.py",
    "tests/unit/test_watch_stage.py": "tests/watches/test_watch_stage.py",
    "tests/unit/test_watch_state.py": "tests/watches/test_watch_state.py",
    "tests/unit/test_webhook_store.py": "tests/servers/test_webhook_store.py",
    "tests/unit/test_webhook_verify.py": "tests/servers/test_webhook_verify.py",
    # integration
    "tests/integration/test_declared_watch.py": "tests/watches/test_declared_watch.py",
    "tests/integration/test_flat_over_time.py": "tests/supervisor/test_flat_over_time.py",
    "tests/integration/test_health_endpoints.py": "tests/observe/test_health_endpoints.py",
    "tests/integration/test_hub_state_changes.py": "tests/supervisor/test_hub_state_changes.py",
    "tests/integration/test_provider_anthropic.py": "tests/models/test_provider_anthropic.py",
    "tests/integration/test_provider_cloud.py": "tests/models/test_provider_cloud.py",
    "tests/integration/test_provider_openai.py": "tests/models/test_provider_openai.py",
    "tests/integration/test_server_files.py": "tests/servers/test_server_files.py",
    "tests/integration/test_server_hardening.py": "tests/servers/test_server_hardening.py",
    "tests/integration/test_server_inbox.py": "tests/servers/test_server_inbox.py",
    "tests/integration/test_server_inbox_delivery.py": "tests/servers/test_server_inbox_delivery.py",
    "tests/integration/test_server_inbox_hook.py": "tests/servers/test_server_inbox_hook.py",
    "tests/integration/test_server_kube.py": "tests/servers/test_server_kube.py",
    "tests/integration/test_server_memo.py": "tests/servers/test_server_memo.py",
    "tests/integration/test_server_webhook.py": "tests/servers/test_server_webhook.py",
    "tests/integration/test_upstream_basic.py": "tests/upstream/test_upstream_basic.py",
    "tests/integration/test_upstream_everything.py": "tests/upstream/test_upstream_everything.py",
    "tests/integration/test_upstream_faults.py": "tests/upstream/test_upstream_faults_component.py",
    "tests/integration/test_upstream_http.py": "tests/upstream/test_upstream_http.py",
    "tests/integration/test_upstream_oauth.py": "tests/upstream/test_upstream_oauth.py",
    "tests/integration/test_upstream_old_sdks.py": "tests/upstream/test_upstream_old_sdks.py",
    "tests/integration/test_upstream_pause.py": "tests/upstream/test_upstream_pause.py",
    "tests/integration/test_upstream_pure.py": "tests/upstream/test_upstream_pure.py",
    "tests/integration/test_upstream_resubscribe.py": "tests/upstream/test_upstream_resubscribe.py",
    "tests/integration/test_upstream_sse.py": "tests/upstream/test_upstream_sse.py",
    "tests/integration/test_upstream_subscriber.py": "tests/upstream/test_upstream_subscriber.py",
    "tests/integration/test_watch_manager.py": "tests/watches/test_watch_manager.py",
    "tests/integration/test_watch_manager_reactor.py": "tests/watches/test_watch_manager_reactor.py",
    "tests/integration/test_watch_misbehaving_server.py": "tests/watches/test_watch_misbehaving_server.py",
    # e2e
    "tests/e2e/test_bundled_servers.py": "tests/servers/test_bundled_servers.py",
    "tests/e2e/test_child_telemetry.py": "tests/observe/test_child_telemetry.py",
    "tests/e2e/test_cli_config.py": "tests/cli/test_cli_config.py",
    "tests/e2e/test_cli_habits.py": "tests/cli/test_cli_habits.py",
    "tests/e2e/test_declared_watches.py": "tests/watches/test_declared_watches.py",
    "tests/e2e/test_demo.py": "tests/docs/test_demo.py",
    "tests/e2e/test_docs_commands.py": "tests/docs/test_docs_commands.py",
    "tests/e2e/test_exit_codes.py": "tests/cli/test_exit_codes.py",
    "tests/e2e/test_install.py": "tests/packaging/test_install.py",
    "tests/e2e/test_kubernetes_runtime.py": "tests/packaging/test_kubernetes_runtime.py",
    "tests/e2e/test_logs.py": "tests/observe/test_logs.py",
    "tests/e2e/test_models.py": "tests/models/test_models.py",
    "tests/e2e/test_modes.py": "tests/routing/test_modes.py",
    "tests/e2e/test_old_sdk_servers.py": "tests/upstream/test_old_sdk_servers.py",
    "tests/e2e/test_once_startup_teardown.py": "tests/supervisor/test_once_startup_teardown.py",
    "tests/e2e/test_reactive.py": "tests/routing/test_reactive.py",
    "tests/e2e/test_routing.py": "tests/routing/test_routing.py",
    "tests/e2e/test_sharding.py": "tests/state/test_sharding.py",
    "tests/e2e/test_silent_mistakes.py": "tests/routing/test_silent_mistakes.py",
    "tests/e2e/test_status.py": "tests/observe/test_status.py",
    "tests/e2e/test_stream_json.py": "tests/observe/test_stream_json.py",
    "tests/e2e/test_systemd.py": "tests/packaging/test_systemd.py",
    "tests/e2e/test_terminal.py": "tests/observe/test_terminal.py",
    "tests/e2e/test_thirdparty_servers.py": "tests/upstream/test_thirdparty_servers.py",
    "tests/e2e/test_tool_content.py": "tests/agent/test_tool_content_command.py",
    "tests/e2e/test_tool_policy.py": "tests/supervisor/test_tool_policy_command.py",
    "tests/e2e/test_tracing.py": "tests/observe/test_tracing.py",
    "tests/e2e/test_watch_settings.py": "tests/watches/test_watch_settings.py",
    "tests/e2e/test_watches.py": "tests/watches/test_watches.py",
    "tests/e2e/test_webhooks.py": "tests/servers/test_webhooks.py",
    # faults (marked pytest.mark.fault on the way; tests/faults/README.md indexes them)
    "tests/faults/test_control_channel.py": "tests/children/test_control_channel.py",
    "tests/faults/test_conversation_faults.py": "tests/state/test_conversation_faults.py",
    "tests/faults/test_eventlog_gap.py": "tests/watches/test_eventlog_gap.py",
    "tests/faults/test_fuzz_parsers.py": "tests/core/test_fuzz_parsers.py",
    "tests/faults/test_health_flood.py": "tests/observe/test_health_flood.py",
    "tests/faults/test_inbox_chaos.py": "tests/servers/test_inbox_chaos.py",
    "tests/faults/test_input_files.py": "tests/config/test_input_files.py",
    "tests/faults/test_model_faults.py": "tests/models/test_model_faults.py",
    "tests/faults/test_model_limits.py": "tests/supervisor/test_model_limits.py",
    "tests/faults/test_model_output_faults.py": "tests/models/test_model_output_faults.py",
    "tests/faults/test_observability_faults.py": "tests/observe/test_observability_faults.py",
    "tests/faults/test_once_prefork.py": "tests/agent/test_once_prefork.py",
    "tests/faults/test_output_faults.py": "tests/observe/test_output_faults.py",
    "tests/faults/test_provider_bounds.py": "tests/models/test_provider_bounds.py",
    "tests/faults/test_redaction.py": "tests/core/test_redaction.py",
    "tests/faults/test_remote_server_faults.py": "tests/upstream/test_remote_server_faults.py",
    "tests/faults/test_routing_faults.py": "tests/routing/test_routing_faults.py",
    "tests/faults/test_sdnotify_faults.py": "tests/observe/test_sdnotify_faults.py",
    "tests/faults/test_session_journal.py": "tests/state/test_session_journal.py",
    "tests/faults/test_signals.py": "tests/supervisor/test_signals.py",
    "tests/faults/test_spawn_faults.py": "tests/children/test_spawn_faults.py",
    "tests/faults/test_state_dir_guard.py": "tests/state/test_state_dir_guard.py",
    "tests/faults/test_subscription_scale.py": "tests/upstream/test_subscription_scale.py",
    "tests/faults/test_supervisor_faults.py": "tests/supervisor/test_supervisor_faults.py",
    "tests/faults/test_upstream_eras.py": "tests/upstream/test_upstream_eras.py",
    "tests/faults/test_upstream_faults.py": "tests/upstream/test_upstream_faults.py",
    "tests/faults/test_watch_faults.py": "tests/watches/test_watch_faults.py",
    "tests/faults/test_watch_server_faults.py": "tests/watches/test_watch_server_faults.py",
    "tests/faults/test_watch_state_guard.py": "tests/watches/test_watch_state_guard.py",
    "tests/faults/test_webhook_faults.py": "tests/servers/test_webhook_faults.py",
    "tests/faults/test_working_directory.py": "tests/cli/test_working_directory.py",
}

#: Where a module of an old folder that MAPPING does not name goes, by the
#: start of its name (after ``test_``, and after ``guard_`` for the mutation
#: guards). First match wins, so longer prefixes come first.
PREFIXES: tuple[tuple[str, str], ...] = (
    ("upstream", "upstream"),
    ("uriset", "upstream"),
    ("resubscribe", "upstream"),
    ("thirdparty_server", "upstream"),
    ("old_sdk", "upstream"),
    ("subscription_scale", "upstream"),
    ("watch", "watches"),
    ("declared_watch", "watches"),
    ("sandbox", "watches"),
    ("extract", "watches"),
    ("notices", "watches"),
    ("eventlog_gap", "watches"),
    ("server", "servers"),
    ("bundled", "servers"),
    ("inbox", "servers"),
    ("webhook", "servers"),
    ("kubernetes", "packaging"),
    ("kube", "servers"),
    ("files", "servers"),
    ("memo", "servers"),
    ("inotify", "servers"),
    ("jsonstream", "servers"),
    ("sdk", "servers"),
    ("model", "models"),
    ("provider", "models"),
    ("pricing", "models"),
    ("config", "config"),
    ("client_config", "config"),
    ("input_files", "config"),
    ("cli", "cli"),
    ("exit", "cli"),
    ("working_dir", "cli"),
    ("state", "state"),
    ("session", "state"),
    ("journal", "state"),
    ("conversation", "state"),
    ("shard", "state"),
    ("router", "routing"),
    ("route", "routing"),
    ("routing", "routing"),
    ("glob", "routing"),
    ("mode", "routing"),
    ("reactive", "routing"),
    ("subscriptions", "routing"),
    ("unmatched", "routing"),
    ("timer", "routing"),
    ("declared", "routing"),
    ("reactor", "supervisor"),
    ("supervisor", "supervisor"),
    ("budget", "supervisor"),
    ("governor", "supervisor"),
    ("agents", "supervisor"),
    ("tool_policy", "supervisor"),
    ("toolpolicy", "supervisor"),
    ("hub", "supervisor"),
    ("signal", "supervisor"),
    ("drain", "supervisor"),
    ("once", "supervisor"),
    ("agent", "agent"),
    ("tool_content", "agent"),
    ("prefork", "agent"),
    ("transcript", "agent"),
    ("spawn", "children"),
    ("zygote", "children"),
    ("child", "children"),
    ("control", "children"),
    ("protocol", "children"),
    ("selfmcp", "children"),
    ("status", "observe"),
    ("metrics", "observe"),
    ("health", "observe"),
    ("trac", "observe"),
    ("telemetry", "observe"),
    ("vocabulary", "observe"),
    ("output", "observe"),
    ("log", "observe"),
    ("humanlog", "observe"),
    ("terminal", "observe"),
    ("stream_json", "observe"),
    ("sdnotify", "observe"),
    ("timeline", "observe"),
    ("activity", "observe"),
    ("observability", "observe"),
    ("redact", "core"),
    ("durations", "core"),
    ("jsonvalue", "core"),
    ("safetext", "core"),
    ("prelaunch", "core"),
    ("hosts", "core"),
    ("errors", "core"),
    ("fuzz", "core"),
    ("k8s", "packaging"),
    ("packaging", "packaging"),
    ("install", "packaging"),
    ("container", "packaging"),
    ("systemd", "packaging"),
    ("thirdparty", "packaging"),
    ("docs", "docs"),
    ("rfcs", "docs"),
    ("architecture", "docs"),
    ("demo", "docs"),
    ("examples", "docs"),
)

#: A name already taken in the subject: the newcomer gets its old folder's suffix.
SUFFIXES: dict[str, str] = {
    "tests/unit": "_pure",
    "tests/integration": "_component",
    "tests/e2e": "_command",
    "tests/faults": "_faults",
}

#: The MCP servers written for the tests: old folder -> new folder.
HELPER_FOLDERS: dict[str, str] = {
    "tests/servers": "tests/mcpservers",
    "tests/faults/servers": "tests/mcpservers",
}

#: Where references are rewritten (files and folders under the root).
REWRITE_ROOTS: tuple[str, ...] = (
    "agentd",
    "tests",
    "bench",
    "scripts",
    "docs",
    "deploy",
    "examples",
    "README.md",
    "rfcs/README.md",
    "pyproject.toml",
    "Containerfile",
    ".ci",
)
TEXT_SUFFIXES = frozenset(
    {".py", ".md", ".toml", ".yaml", ".yml", ".json", ".txt", ".cfg", ".ini", ".sh", ".j2", ".tpl", ""}
)
SKIP_PARTS = frozenset({"__pycache__", ".git", "node_modules", ".venv", ".mypy_cache", ".ruff_cache"})
THIS_FILE = "scripts/retest.py"
#: Lines the leftover check would flag that are right as they are (prose about the old folders).
KNOWN_GOOD = (
    "docs/testing.md",
    'REPO / "tests" / "faults" / "README.md"',
)
FAULT_MARK = "pytest.mark.fault"


def run(cmd: list[str], root: Path, dry: bool) -> None:
    if dry:
        print("would run:", " ".join(cmd))
        return
    subprocess.run(cmd, cwd=root, check=True)


def subject_by_name(name: str) -> str | None:
    """The subject of a test module's file name, from :data:`PREFIXES` (None: no rule)."""
    stem = name.removesuffix(".py").removeprefix("test_").removeprefix("guard_")
    for prefix, subject in PREFIXES:
        if stem.startswith(prefix):
            return subject
    return None


def plan(root: Path) -> tuple[dict[str, str], list[str]]:
    """Old path -> new path for every file still to move (and to have moved), and the unplaced."""
    moves: dict[str, str] = {}
    unplaced: list[str] = []
    taken = {new for new in MAPPING.values()}
    for folder in OLD_FOLDERS:
        for p in sorted((root / folder).glob("test_*.py")):
            old = p.relative_to(root).as_posix()
            if old in MAPPING:
                moves[old] = MAPPING[old]
                continue
            subject = subject_by_name(p.name)
            if subject is None:
                unplaced.append(old)
                continue
            new = f"tests/{subject}/{p.name}"
            if new in taken or (root / new).exists():
                new = f"tests/{subject}/{p.stem}{SUFFIXES[folder]}.py"
            if new in taken or (root / new).exists():
                unplaced.append(old)
                continue
            taken.add(new)
            moves[old] = new
    for old_folder, new_folder in HELPER_FOLDERS.items():
        for p in sorted((root / old_folder).glob("*.py")):
            if p.name.startswith("test_") or p.name in ("__init__.py", "conftest.py"):
                continue
            moves[p.relative_to(root).as_posix()] = f"{new_folder}/{p.name}"
    return moves, unplaced


def mark_fault(path: Path) -> bool:
    """Add ``pytest.mark.fault`` to the module's ``pytestmark`` (once). True when it changed."""
    text = path.read_text()
    if FAULT_MARK in text:
        return False
    tree = ast.parse(text)
    lines = text.splitlines(keepends=True)
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "pytestmark" for t in node.targets
        ):
            start, end = node.value.lineno - 1, node.value.end_lineno or node.value.lineno
            value = ast.get_source_segment(text, node.value) or ""
            if isinstance(node.value, ast.List):
                inner = value.strip()[1:-1].strip()
                new_value = f"[{FAULT_MARK}, {inner}]" if inner else f"[{FAULT_MARK}]"
            else:
                new_value = f"[{FAULT_MARK}, {value}]"
            head = lines[start][: node.value.col_offset]
            tail = lines[end - 1][node.value.end_col_offset or 0 :]
            lines[start:end] = [head + new_value + tail]
            path.write_text("".join(lines))
            return True
    imports = [n for n in tree.body if isinstance(n, ast.Import | ast.ImportFrom)]
    has_pytest = any(isinstance(n, ast.Import) and any(a.name == "pytest" for a in n.names) for n in imports)
    after = max((n.end_lineno or n.lineno) for n in imports) if imports else 0
    if not imports and tree.body and isinstance(tree.body[0], ast.Expr):
        after = tree.body[0].end_lineno or 0
    insert = ("import pytest\n" if not has_pytest else "") + f"\npytestmark = {FAULT_MARK}\n"
    lines[after:after] = [insert]
    path.write_text("".join(lines))
    return True


def move(root: Path, moves: dict[str, str], dry: bool) -> list[str]:
    """Step 1 and 2: the moves, the packages, the fault marks. Returns the moved fault modules."""
    marked: list[str] = []
    for subject in (*SUBJECTS, "mcpservers"):
        init = root / "tests" / subject / "__init__.py"
        if not init.exists():
            if dry:
                print("would create", init.relative_to(root))
            else:
                init.parent.mkdir(parents=True, exist_ok=True)
                init.write_text("")
                run(["git", "add", init.relative_to(root).as_posix()], root, dry)
    for old, new in moves.items():
        old_p, new_p = root / old, root / new
        if old_p.exists() and new_p.exists():
            sys.exit(f"retest: both {old} and {new} exist; resolve by hand")
        if old_p.exists():
            run(["git", "mv", old, new], root, dry)
        if old.startswith("tests/faults/test_") and (dry or new_p.exists()):
            if dry:
                print("would mark fault:", new)
            elif mark_fault(new_p):
                marked.append(new)
    # Folders left with nothing but an empty package marker go.
    for folder in (*OLD_FOLDERS, *HELPER_FOLDERS):
        base = root / folder
        init = base / "__init__.py"
        if not base.is_dir():
            continue
        rest = [p for p in base.rglob("*.py") if p != init and "__pycache__" not in p.parts]
        if init.exists() and not rest and not init.read_text().strip():
            run(["git", "rm", "-q", init.relative_to(root).as_posix()], root, dry)
        if not dry and not any(p for p in base.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
            for d in sorted((p for p in base.rglob("*") if p.is_dir()), reverse=True):
                for f in d.iterdir():
                    f.unlink()
                d.rmdir()
            base.rmdir()
    return marked


def files_to_rewrite(root: Path) -> list[Path]:
    out: list[Path] = []
    for name in REWRITE_ROOTS:
        base = root / name
        if base.is_file():
            out.append(base)
        elif base.is_dir():
            for p in sorted(base.rglob("*")):
                if not p.is_file() or SKIP_PARTS.intersection(p.parts):
                    continue
                if p.suffix not in TEXT_SUFFIXES:
                    continue
                if p.relative_to(root).as_posix() == THIS_FILE:
                    continue
                out.append(p)
    return out


def dotted(path: str) -> str:
    return path.removesuffix(".py").replace("/", ".")


def rewrite_text(text: str, mapping: dict[str, str]) -> str:
    for old, new in sorted(mapping.items(), key=lambda kv: len(kv[0]), reverse=True):
        text = re.sub(rf"(?<![\w/.-]){re.escape(old)}(?![\w])", new, text)
        text = re.sub(rf"(?<![\w.]){re.escape(dotted(old))}(?![\w])", dotted(new), text)
    return text


def rewrite(root: Path, mapping: dict[str, str], dry: bool) -> list[Path]:
    changed: list[Path] = []
    for path in files_to_rewrite(root):
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        new = rewrite_text(text, mapping)
        if new != text:
            changed.append(path)
            if dry:
                print("would rewrite", path.relative_to(root))
            else:
                path.write_text(new)
    return changed


_OLD_NAMES = re.compile(
    r"tests[/.](?:unit|integration|e2e)\b|tests/faults(?!/README)|tests\.faults\b"
    r"|\"tests\" / \"(?:unit|integration|e2e|faults)\""
    r"|tests[/.]servers[/.](?:notes_server|oauth_server|oldsdk_server|traced_server|watch_server|helpers)"
    r"|\"servers\" / \"(?:\w+_server|helpers)\.py\""
)


def leftovers(root: Path) -> list[str]:
    """Lines that still name an old folder (prose about the old layout, or a form not rewritten)."""
    out: list[str] = []
    for path in files_to_rewrite(root):
        try:
            lines = path.read_text().splitlines()
        except UnicodeDecodeError:
            continue
        rel = path.relative_to(root).as_posix()
        if rel in KNOWN_GOOD:
            continue
        for no, line in enumerate(lines, 1):
            if any(good in line for good in KNOWN_GOOD):
                continue
            if _OLD_NAMES.search(line):
                out.append(f"{path.relative_to(root)}:{no}: {line.strip()}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent)
    parser.add_argument("--dry-run", action="store_true", help="say what would change, change nothing")
    parser.add_argument("--no-format", action="store_true", help="do not run ruff on the changed files")
    args = parser.parse_args(argv)
    root: Path = args.root.resolve()
    if not (root / "tests" / "conftest.py").is_file():
        print(
            f"retest: --root {str(root)!r} has no tests/conftest.py; pass the repository's root",
            file=sys.stderr,
        )
        return 2
    moves, unplaced = plan(root)
    # Every mapping in effect, for the rewrite: a re-run rewrites references
    # that a merged branch added to paths moved by an earlier run.
    mapping = {**MAPPING, **moves}
    for old_folder, new_folder in HELPER_FOLDERS.items():
        for p in sorted((root / new_folder).glob("*.py")):
            if p.name != "__init__.py":
                mapping.setdefault(f"{old_folder}/{p.name}", f"{new_folder}/{p.name}")
    mapping = {o: n for o, n in mapping.items() if o != n}
    marked = move(root, moves, args.dry_run)
    changed = rewrite(root, mapping, args.dry_run)
    py = sorted(
        {str(p.relative_to(root)) for p in changed if p.suffix == ".py" and p.exists()}
        | {m for m in marked if (root / m).exists()}
    )
    if py and not args.no_format and not args.dry_run:
        subprocess.run(["ruff", "check", "--quiet", "--select", "I", "--fix", *py], cwd=root, check=False)
        subprocess.run(["ruff", "format", "--quiet", *py], cwd=root, check=False)
    moved = sum(1 for o in moves if not (root / o).exists())
    print(f"retest: {moved} files moved, {len(marked)} marked fault, {len(changed)} files rewritten")
    problems = 0
    if unplaced:
        problems += len(unplaced)
        print("test modules no rule places (add them to MAPPING or PREFIXES, then re-run):")
        for u in unplaced:
            print("  ", u)
    if not args.dry_run:
        rest = leftovers(root)
        if rest:
            problems += len(rest)
            print("lines that still name an old folder (rewrite by hand):")
            for line in rest:
                print("  ", line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

"""What a run prints: one line per cycle, violation details, and the summary."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from pathlib import Path

from faults.checks import Violation
from faults.cycle import CycleResult
from faults.inject import Incident

EXAMPLES_PER_KIND = 3


def cycle_line(r: CycleResult, cycles: int) -> str:
    kinds = Counter(
        f.kind.split(":")[0] if f.kind.startswith("poison") else f.kind for f in r.faults
    )
    faults = ", ".join(f"{k}x{n}" for k, n in sorted(kinds.items())) or "none"
    incidents = f" | unexpected exits {len(r.incidents)}" if r.incidents else ""
    return (
        f"cycle {r.number}/{cycles}: {r.seconds:.0f} s | faults {faults} | orders attempted "
        f"{r.attempted}, accepted {r.accepted}, final {r.final} | enrollments accepted "
        f"{r.enrollments_accepted}, settled {r.enrollments_settled} | violations "
        f"{len(r.violations)}{incidents}"
    )


def cycle_details(r: CycleResult) -> list[str]:
    """Faults with their timing, unexpected exits, and each violation kind with examples."""
    faults = sorted(r.faults, key=lambda f: f.at)
    lines = [f"  fault at {f.at:5.1f} s: {f.kind} ({f.detail})" for f in faults]
    lines += incident_lines(r)
    if r.store_check:
        lines.append(f"  stores at the end: {r.store_check}")
    if r.client_stats:
        lines.append(f"  client: {dict(sorted(r.client_stats.items()))}")
    lines += violation_lines(r.violations)
    if r.violations:
        lines.append("  logs: " + " ".join(r.logs))
    return lines


def incident_lines(r: CycleResult) -> list[str]:
    """Unexpected exits, one line per service (a crash loop is one finding), with the last
    lines of the first run that died."""
    lines = []
    by_service: dict[str, list[Incident]] = {}
    for incident in r.incidents:
        by_service.setdefault(incident.service, []).append(incident)
    for service, incidents in sorted(by_service.items()):
        codes = sorted({str(i.exit_code) for i in incidents})
        first, last = incidents[0], incidents[-1]
        lines.append(
            f"  UNEXPECTED EXIT of {service} x{len(incidents)} (exit codes {', '.join(codes)}), "
            f"first at {first.at:.1f} s, last at {last.at:.1f} s; first log {first.log}"
        )
        lines += [f"     | {line}" for line in _tail(Path(first.log), 4)]
    return lines


def _tail(path: Path, n: int) -> list[str]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return [line[:240] for line in text.splitlines()[-n:]]


def violation_lines(violations: Iterable[Violation]) -> list[str]:
    by_kind: dict[str, list[Violation]] = {}
    for v in violations:
        by_kind.setdefault(v.kind, []).append(v)
    lines = []
    for kind, vs in sorted(by_kind.items()):
        lines.append(f"  VIOLATION {kind} x{len(vs)}")
        for v in vs[:EXAMPLES_PER_KIND]:
            lines.append(f"   - {v.subject}: {v.detail}")
            lines += [f"     {e}" for e in v.evidence]
        if len(vs) > EXAMPLES_PER_KIND:
            lines.append(f"   ... and {len(vs) - EXAMPLES_PER_KIND} more")
    return lines


def summary(
    results: list[CycleResult], cycles: int, aborted: str | None, workers: int = 1
) -> list[str]:
    faults = Counter(f.kind for r in results for f in r.faults)
    process = {k: n for k, n in faults.items() if not k.startswith("poison:")}
    poison = {k.removeprefix("poison:"): n for k, n in faults.items() if k.startswith("poison:")}
    violations = Counter(v.kind for r in results for v in r.violations)
    incidents = Counter(i.service for r in results for i in r.incidents)
    accepted = sum(r.accepted for r in results)
    lines = [
        f"SUMMARY: {len(results)}/{cycles} cycles, {workers} worker process"
        f"{'es' if workers > 1 else ''}, {accepted} orders accepted, "
        f"{sum(r.final for r in results)} final, {sum(violations.values())} violations",
        f"  process faults: {dict(sorted(process.items()))}",
        f"  poison records: {dict(sorted(poison.items()))} ({sum(poison.values())} in all)",
        f"  violations by kind: {dict(sorted(violations.items())) or 'none'}",
        f"  cycles with violations: {[r.number for r in results if r.violations] or 'none'}",
        f"  unexpected exits: {dict(sorted(incidents.items())) or 'none'}",
    ]
    if aborted:
        lines.append(f"  ABORTED: {aborted}")
    return lines

"""benchmarks/results_tables.py: RESULTS.md is generated from the scripts' recorded tables, holds
tables only and at most MAX_LINES lines, and a script run with --record replaces its own tables."""

import glob
import os
import re
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
import results_tables  # noqa: E402

#: Scripts of benchmarks/ that are helpers of the others, not benchmarks with tables of their own.
HELPERS = {"ab_compare", "gc_pauses", "machine", "peers_memory", "results_tables", "timing"}


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def test_results_md_is_generated_from_the_recorded_tables():
    assert results_tables.write_results(check=True), "benchmarks/RESULTS.md is stale: run python benchmarks/results_tables.py"


def test_results_md_is_short_and_holds_no_template_markers():
    text = _read(results_tables.RESULTS_PATH)
    assert len(text.splitlines()) <= results_tables.MAX_LINES
    assert "<!--" not in text


def test_every_script_with_tables_is_listed_and_every_listed_one_exists():
    scripts = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "benchmarks", "*.py"))}
    listed = {script for script, _ in results_tables.SCRIPTS}
    assert listed <= scripts, f"SCRIPTS names scripts that are not there: {listed - scripts}"
    assert scripts - HELPERS == listed, f"benchmark scripts missing from SCRIPTS: {scripts - HELPERS - listed}"
    recorded = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(results_tables.TABLES_DIR, "*.md"))}
    assert recorded <= listed, f"tables of scripts not in SCRIPTS: {recorded - listed}"


def test_the_readme_lists_every_script_with_its_command():
    readme = _read(os.path.join(ROOT, "benchmarks", "README.md"))
    scripts = {os.path.basename(p)[:-3] for p in glob.glob(os.path.join(ROOT, "benchmarks", "*.py"))}
    named = set(re.findall(r"`(\w+)\.py`", readme))
    assert scripts <= named, f"benchmarks/README.md does not list {sorted(scripts - named)}"
    commands = set(re.findall(r"python benchmarks/(\w+)\.py", readme))
    assert scripts - {"gc_pauses", "machine", "peers_memory", "timing"} <= commands


def test_every_script_with_tables_records_them_through_the_writer():
    for script, _ in results_tables.SCRIPTS:
        text = _read(os.path.join(ROOT, "benchmarks", f"{script}.py"))
        assert f'results_tables.run(main, "{script}")' in text or f'results_tables.record("{script}"' in text, script


def test_table_blocks_are_the_runs_of_table_lines():
    text = "machine\n| a | b |\n|---|---|\n| 1 | 2 |\nprose\n\n| c |\n|---|\n"
    assert results_tables.table_blocks(text) == [["| a | b |", "|---|---|", "| 1 | 2 |"], ["| c |", "|---|"]]


@pytest.fixture
def tables_here(tmp_path, monkeypatch):
    monkeypatch.setattr(results_tables, "TABLES_DIR", str(tmp_path / "tables"))
    monkeypatch.setattr(results_tables, "RESULTS_PATH", str(tmp_path / "RESULTS.md"))
    return tmp_path


def test_a_run_with_record_replaces_the_script_s_tables_only(tables_here, monkeypatch, capsys):
    results_tables.record("bench_eval", "`old eval`:\n\n| x |\n|---|\n")
    results_tables.record("bench_losses", "`old losses`:\n\n| y |\n|---|\n")

    def main():
        assert sys.argv[1:] == ["--runs", "3"]  # the flag is the writer's, not the script's
        print("Linux x86_64, a CPU, 2 usable cores, load average 1.00, no GPU")
        print("| loss | ms |\n|---|---:|\n| a | 1.0 |")

    monkeypatch.setattr(sys, "argv", ["bench_losses.py", "--runs", "3", "--record"])
    assert results_tables.run(main, "bench_losses") == 0
    text = _read(results_tables.RESULTS_PATH)
    assert "`python benchmarks/bench_losses.py --runs 3` on Linux x86_64, a CPU, 2 usable cores" in text
    assert "| a | 1.0 |" in text and "old losses" not in text and "`old eval`" in text
    assert text.index("## Losses") < text.index("## Evaluation")  # the order of SCRIPTS


def test_a_run_without_record_or_that_fails_records_nothing(tables_here, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["bench_losses.py"])
    assert results_tables.run(lambda: print("| a |\n|---|"), "bench_losses") == 0
    monkeypatch.setattr(sys, "argv", ["bench_losses.py", "--record"])
    assert results_tables.run(lambda: 2, "bench_losses") == 2
    assert not os.path.exists(results_tables.RESULTS_PATH)


def test_results_md_longer_than_the_limit_is_refused(tables_here, monkeypatch):
    monkeypatch.setattr(results_tables, "MAX_LINES", 10)
    with pytest.raises(ValueError, match="more than 10"):
        results_tables.record("bench_eval", "`c`:\n\n" + "\n".join(["| x |"] * 20))


def test_an_unknown_script_is_refused(tables_here):
    with pytest.raises(ValueError, match="not a script of benchmarks/RESULTS.md"):
        results_tables.record("bench_nothing", "| x |")

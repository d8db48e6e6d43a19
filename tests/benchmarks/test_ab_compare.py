"""benchmarks/ab_compare.py: each side of a before/after comparison runs the working
tree's benchmark script against its own tfdml. The scripts put their own checkout first
on sys.path, which once made both sides import the working tree's tfdml (an A/B of the
same code, ratios of 1.0). No timing is asserted."""

import importlib.util
import os

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_spec = importlib.util.spec_from_file_location("ab_compare", os.path.join(ROOT, "benchmarks", "ab_compare.py"))
ab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ab)

FAKE_TFDML = 'import sys\nprint("TFDML_FROM", __file__)\nsys.exit(0)\n'


def test_each_side_imports_the_tfdml_of_its_own_tree(tmp_path):
    tree = tmp_path / "before"
    (tree / "tfdml").mkdir(parents=True)
    (tree / "tfdml" / "__init__.py").write_text(FAKE_TFDML)  # stands for an exported revision
    ab.prepare_tree(str(tree))
    with open(os.path.join(ROOT, "benchmarks", "bench_losses.py")) as mine:
        assert (tree / "benchmarks" / "bench_losses.py").read_text() == mine.read()
    out = ab.run(str(tree), "bench_losses.py", [])
    assert f"TFDML_FROM {tree / 'tfdml' / '__init__.py'}" in out


def test_table_rows_name_rows_by_their_text_cells():
    text = "| loss | sampler | 1.50 | 0.75 |\n|---|---|---:|---:|\n| triplet | hard | 2 | 3.25 |\nnot a row"
    assert ab.table_rows(text) == {"loss | sampler": [1.5, 0.75], "triplet | hard": [2.0, 3.25]}


def test_ratio_cells_are_figures_not_part_of_the_row_name():
    # bench_semi_hard.py prints ratios such as "1.73×"; as text they made every round's row
    # names differ, so before and after shared no row and the comparison table came out empty.
    before = ab.table_rows("| 256 | graph | compare K=3 | 8.64 | 4.98 | 1.73× |")
    after = ab.table_rows("| 256 | graph | compare K=3 | 7.10 | 4.90 | 1.45× |")
    assert list(before) == list(after) == ["256 | graph | compare K=3"]
    assert before["256 | graph | compare K=3"] == [8.64, 4.98, 1.73]


def test_a_leading_number_names_the_row():
    # The batch size in the first column tells rows apart; taken as a figure, the B = 256 and
    # B = 1024 rows of one mode would have had the same name and overwritten each other.
    rows = ab.table_rows("| 256 | XLA | 4.95 |\n| 1024 | XLA | 113.4 |")
    assert rows == {"256 | XLA": [4.95], "1024 | XLA": [113.4]}


def test_rows_with_the_same_text_cells_are_kept_apart():
    # bench_first_call.py prints the batch size as a figure after the text cells: rows of
    # B = 256 and B = 1024 have the same text, and the second silently replaced the first.
    text = ("| triplet | semi_hard | xla | 256 | 5.9 |\n| triplet | semi_hard | xla | 1024 | 8.8 |\n"
            "| margin | semi_hard | xla | 256 | 5.7 |")
    assert ab.table_rows(text) == {"triplet | semi_hard | xla": [256.0, 5.9],
                                   "triplet | semi_hard | xla #2": [1024.0, 8.8],
                                   "margin | semi_hard | xla": [256.0, 5.7]}

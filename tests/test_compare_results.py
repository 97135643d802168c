"The script that checks a refactor moved no result: it sees a moved number, a lost key, and ignores timings."

import importlib.util
import json
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "compare_results", Path(__file__).resolve().parents[1] / "bench" / "compare_results.py"
)
cr = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(cr)


def test_same_numbers_pass_and_timings_are_ignored(tmp_path):
    a = {"stage.base.asr": 0.25, "stage.base.eval_seconds": 12.0, "x": float("nan")}
    b = {"stage.base.asr": 0.25, "stage.base.eval_seconds": 99.0, "x": float("nan")}
    assert cr.compare(a, b) == {"changed": [], "added": [], "dropped": [], "compared": 2}


def test_a_moved_number_an_added_and_a_dropped_key_are_differences(tmp_path):
    a = {"stage.base.asr": 0.25, "gone": 1}
    b = {"stage.base.asr": 0.26, "new.key": 2, "stage.s.seed.1.asr": 0.5}
    d = cr.compare(a, b, allow_new=["stage.s.seed."])
    assert (d["changed"], d["added"], d["dropped"]) == (["stage.base.asr"], ["new.key"], ["gone"])
    (tmp_path / "a.json").write_text(json.dumps(a))
    (tmp_path / "b.json").write_text(json.dumps(b))
    assert cr.main([str(tmp_path / "a.json"), str(tmp_path / "b.json")]) == 1
    assert cr.main([str(tmp_path / "a.json"), str(tmp_path / "a.json")]) == 0

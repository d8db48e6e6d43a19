"""tfdml_app.fit: the end of a run reads its figures from the evaluation's result."""

from tfdml_app import config, evaluation, fit


class _Split:
    name = "test"


def test_final_evaluation_takes_the_figures_from_the_result_not_from_metrics_json(tmp_path, monkeypatch):
    cfg = config.validate({"evaluation": {"baseline": "raw_pixels"}})
    record = {"metrics": {"recall@1": 0.5, "num_queries": 10}, "info": {}}
    result = evaluation.Result(
        metrics={"recall@1": 0.5, "num_queries": 10},
        baseline={"name": "raw_pixels", "metrics": {"recall@1": 0.25, "nmi": None}},
        calibration=None, record=record, paths={"metrics": str(tmp_path / "metrics.json"), "plots": []})
    calls = []

    def run(*args, **kwargs):  # writes no file
        calls.append(kwargs)
        return result

    monkeypatch.setattr(evaluation, "run", run)
    figures, _ = fit.final_evaluation(cfg, None, _Split(), str(tmp_path), verbose=0)
    assert figures == {"metrics": {"recall@1": 0.5, "num_queries": 10.0},
                       "baseline": {"name": "raw_pixels", "metrics": {"recall@1": 0.25}}}
    assert not (tmp_path / "metrics.json").exists()
    assert calls[-1]["extra_record"] is None
    # The last epoch's figures go into the one metrics.json that evaluation.run writes.
    last = {"epoch": 3, "metrics": {"recall@1": 0.4}}
    fit.final_evaluation(cfg, None, _Split(), str(tmp_path), verbose=0, last_epoch=last)
    assert calls[-1]["extra_record"] == {"last_epoch": last}
    assert not (tmp_path / "metrics.json").exists()

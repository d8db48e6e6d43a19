"""What ``train.py`` prints: the data before training and the result after it."""

import os


def data_summary(data):
    """Two lines for the terminal before training (:func:`tfdml_app.data.describe_data`)."""
    def shape(dims):
        return "×".join(str(d) for d in dims)

    images = f"images {shape(data['image_shape'])}"
    if data["model_input"] != data["image_shape"]:
        images += f" (model input {shape(data['model_input'])})"
    parts = [f"train {data['train']['classes']} classes, {data['train']['images']} images"]
    v = data["validation"]
    if v is not None:
        names = v["class_names"]
        shown = ", ".join(names[:12]) + (", ..." if len(names) > 12 else "")
        what = "held out of" if v["mode"] == "classes" else "examples of each class held out of"
        parts.append(f"validation {v['classes']} classes ({shown}), {v['images']} images "
                     f"({what} the training split: fraction {v['fraction']}, seed {v['seed']})")
    parts.append(f"test {data['test']['classes']} classes, {data['test']['images']} images")
    return f"data: {data['source']}, {images}\n  " + "; ".join(parts)


def summary(cfg, result):
    if "metrics" not in result:  # a non-chief worker of a multi-worker run
        return (
            f"worker finished: {len(result['history'].get('loss', []))} epoch(s), "
            f"weights in {os.path.join(result['output_dir'], 'final.weights.h5')}; "
            "the chief writes the metrics and the export."
        )
    lines = [
        "",
        "=" * 60,
        f"tfdml run: {cfg['loss']['name']} loss, {cfg['design']['name']} design, "
        f"{cfg['data']['source']} data",
        f"output: {result['output_dir']}   time: {result['seconds']:.0f}s"
        + (f"   (resumed after epoch {result['resumed_from_epoch']})" if result["resumed_from_epoch"] else ""),
        f"{'model.keras and saved_model/' if cfg['export']['saved_model'] else 'model.keras'}: "
        f"{result.get('best_checkpoint', 'the last epoch')}",
        "held-out metrics (the test split, scored once after training, with that model):",
    ]
    baseline, last = result.get("baseline"), result.get("last_epoch")
    width = max([16] + [len(k) for k in result["metrics"]])
    columns = [("model", None, 7)]
    if last:
        columns.append((f"epoch {last['epoch']}", last["metrics"], 8))
    if baseline:
        columns.append((baseline["name"], baseline["metrics"], max(10, len(baseline["name"]))))
    if len(columns) > 1:
        lines.append(f"  {'':<{width}} " + "  ".join(f"{name:>{w}}" for name, _, w in columns))
    for key, value in result["metrics"].items():
        if key.startswith("num_"):  # counts (num_queries, ...), not figures
            lines.append(f"  {key:<{width}} {int(value):>7d}")
        elif isinstance(value, float):
            cells = [f"{value:>7.4f}"] + [
                f"{figures[key]:>{w}.4f}" if key in figures else f"{'-':>{w}}"
                for _, figures, w in columns[1:]]
            lines.append(f"  {key:<{width}} " + "  ".join(cells))
    if last:
        lines.append(f"  (epoch {last['epoch']}: the last epoch's model, not kept)")
    if baseline:
        lines += baseline_warnings(result["metrics"], baseline)
    if "lookup" in result:
        lines.append(f"lookup: {os.path.join(result['output_dir'], 'lookup')}; "
                     f"is_match: {result['lookup']['is_match']}")
    lines.append("=" * 60)
    return "\n".join(lines)


def baseline_warnings(metrics, baseline):
    """One line per figure on which the model-free baseline beats the model."""
    from tfdml.metrics import LOWER_IS_BETTER

    out = []
    for key, value in metrics.items():
        other = baseline["metrics"].get(key)
        if (key.startswith("num_") or key.endswith("_std") or not isinstance(value, float)
                or not isinstance(other, float)):
            continue
        lower = key in LOWER_IS_BETTER
        if (other < value) if lower else (other > value):
            out.append(f"warning: {baseline['name']} beat the model on {key} ({other:.4f} against "
                       f"{value:.4f}{'; lower is better' if lower else ''})")
    return out

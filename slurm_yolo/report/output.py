"""Report output: a terminal table, CSV, JSON, and a self-contained HTML page with PNG plots."""

from __future__ import annotations

import base64
import html
import io
import json

import pandas as pd


def table(views: dict[str, pd.DataFrame]) -> str:
    parts = []
    for name, df in views.items():
        parts.append(f"== {name}")
        parts.append(df.to_string(index=False, float_format=lambda x: f"{x:,.3g}") if len(df) else "(no data)")
    return "\n".join(parts) + "\n"


def csv(views: dict[str, pd.DataFrame]) -> str:
    """One CSV block per view, each preceded by a ``# view`` line."""
    return "".join(f"# {name}\n{df.to_csv(index=False)}" for name, df in views.items())


def as_json(views: dict[str, pd.DataFrame]) -> str:
    return json.dumps({name: json.loads(df.to_json(orient="records", date_format="iso")) for name, df in views.items()},
                      indent=2)  # fmt: skip


def _png(fig: object) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")  # type: ignore[attr-defined]
    return base64.b64encode(buf.getvalue()).decode()


def plots(views: dict[str, pd.DataFrame]) -> dict[str, str]:
    """PNG (base64) per view that has a picture: GPU-hours, prediction error, waits, k over time."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = {}
    specs = {
        "usage": ("Account", "gpu_hours", "GPU-hours by account"),
        "accuracy": ("Partition", "median_abs_error", "median |error| of predicted run time"),
        "waits": ("Partition", "median", "median queue wait (s)"),
    }
    for name, (x, y, title) in specs.items():
        df = views.get(name)
        if df is None or df.empty or y not in df:
            continue
        data = df.groupby(x)[y].sum()
        fig, ax = plt.subplots(figsize=(6, 3))
        data.plot.bar(ax=ax, title=title, color="#3a6ea5")
        out[name] = _png(fig)
        plt.close(fig)
    k = views.get("k")
    if k is not None and not k.empty:
        fig, ax = plt.subplots(figsize=(6, 3))
        for part, g in k.groupby("partition"):
            ax.plot(pd.to_datetime(g["at"]), g["k"], marker="o", label=str(part))
        ax.set_title("k (s per million effective tokens) over time")
        ax.legend()
        out["k"] = _png(fig)
        plt.close(fig)
    return out


def html_page(views: dict[str, pd.DataFrame], title: str = "slurm-yolo report") -> str:
    """One self-contained page (plots embedded) an admin can mail or publish."""
    images = plots(views)
    body = [f"<h1>{html.escape(title)}</h1>"]
    for name, df in views.items():
        body.append(f"<h2>{html.escape(name)}</h2>")
        if name in images:
            body.append(f'<img alt="{html.escape(name)}" src="data:image/png;base64,{images[name]}">')
        body.append(df.to_html(index=False, float_format=lambda x: f"{x:,.3g}", na_rep="") if len(df) else "<p>no data</p>")
    style = "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:3px 8px}"
    return f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title><style>{style}</style></head><body>{''.join(body)}</body></html>"

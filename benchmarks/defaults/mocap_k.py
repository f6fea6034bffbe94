"""karcher on mocap6: standardize -> window_covariance(window=W) -> karcher(**kw); change_at
mapped to raw frames by + (W - 1) (karcher counts covariance records)."""
from harness import evaluate, line, never

from shiftwatch.operators import create


def kchain(W=50, std=30, **kw):
    def fn(values):
        ops = [create("standardize", burn_in=std), create("window_covariance", window=W),
               create("karcher", **kw)]
        recs = [{"key": "k", "ts": float(i), "value": v.tolist()} for i, v in enumerate(values)]
        for op in ops:
            recs = op.process_batch(recs)
        return [int(o["change_at"]) + W - 1 for o in recs if isinstance(o, dict) and o.get("alarm")]
    return fn


if __name__ == "__main__":
    print(line("never", evaluate(never, "mocap")))
    for W in (50, 20, 10):
        for B in (400, 200, 149, 100, 50, 20):
            r = evaluate(kchain(W=W, burn_in=B), "mocap")
            print(f"W {W} burn_in {B}", line("", r), [x["preds"] for x in r["rows"]][:2], flush=True)

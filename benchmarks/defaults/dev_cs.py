"""Before/after of cs on tssb-dev and River's five TCPD series, behind standardize (burn-in
30), as `shiftwatch demo` runs it; predictions = the alarms' change_at.
before = cs scale='marginal' (the old default: 30-value marginal burn-in); after = defaults."""
import json

from harness import chain, evaluate, line, never

out = {}
for ds in ("tssb", "river"):
    for label, fn in (("never alarm", never),
                      ("before: standardize -> cs scale=marginal", chain(("standardize", {}), ("cs", {"scale": "marginal"}))),
                      ("after: standardize -> cs (new defaults)", chain(("standardize", {}), ("cs", {})))):
        r = evaluate(fn, ds, verbose=True, label=label)
        out[f"{ds}|{label}"] = r
        print(line(label, r))
json.dump(out, open("dev_cs.json", "w"), default=float, indent=1)

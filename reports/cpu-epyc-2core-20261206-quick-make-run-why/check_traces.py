"""The README's hand check: reads two gzipped Chrome traces of a run (a trick's cell and its
reference), not results.json, and recomputes what the diagnosis rests on, independently of
trickbench's code: the reference's traced step and its time outside operators, the share of its
convolutions and matmuls, elementwise operators and attention (Amdahl's ceiling for each), and the
operators whose calls per step changed, with their self-time change.

    python3 check_traces.py TRICK.json.gz REFERENCE.json.gz [STEPS]
"""

import collections
import gzip
import json
import sys

MATMULS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::matmul", "aten::linear",
           "aten::addmv", "aten::mv", "aten::_scaled_mm", "aten::_addmm_activation"}
ELEMENTWISE = {"aten::add", "aten::sub", "aten::mul", "aten::div", "aten::neg", "aten::pow", "aten::exp",
               "aten::relu", "aten::clamp_min", "aten::threshold_backward", "aten::gelu", "aten::gelu_backward",
               "aten::tanh", "aten::tanh_backward", "aten::sigmoid", "aten::sigmoid_backward", "aten::silu",
               "aten::silu_backward", "aten::native_dropout", "aten::native_dropout_backward", "aten::bernoulli_",
               "aten::masked_fill", "aten::where", "aten::_to_copy"}
ATTENTION = {"aten::bmm", "aten::baddbmm", "aten::_softmax", "aten::_softmax_backward_data", "aten::masked_fill",
             "aten::masked_fill_"}


def operators(path, steps):
    """Self time (ms) and calls per step of each CPU operator, the training thread's step (ms) and
    its time outside operators (ms)."""
    events = [e for e in json.load(gzip.open(path))["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    threads = collections.defaultdict(list)
    for e in events:
        threads[(e["pid"], e["tid"])].append(e)
    own = {}
    for timeline in threads.values():
        timeline.sort(key=lambda e: (e["ts"], -e["dur"]))
        open_events = []
        for e in timeline:
            while open_events and open_events[-1]["ts"] + open_events[-1]["dur"] <= e["ts"]:
                open_events.pop()
            own[id(e)] = own.get(id(e), 0.0) + e["dur"]
            if open_events:
                own[id(open_events[-1])] = own.get(id(open_events[-1]), 0.0) - e["dur"]
            open_events.append(e)
    self_ms, calls = collections.defaultdict(float), collections.Counter()
    for e in events:
        self_ms[e["name"]] += own[id(e)] / 1e3 / steps
        calls[e["name"]] += 1 / steps
    spans = sorted((e["ts"], e["ts"] + e["dur"]) for e in max(threads.values(), key=len))
    covered, (start, end) = 0.0, spans[0]
    for s, e in spans[1:]:
        if s <= end:
            end = max(end, e)
        else:
            covered, (start, end) = covered + end - start, (s, e)
    covered += end - start
    span = max(e for _, e in spans) - spans[0][0]
    return self_ms, calls, span / 1e3 / steps, (span - covered) / 1e3 / steps


def main(trick, reference, steps=3):
    ref_ms, ref_calls, step, outside = operators(reference, steps)
    ms, calls, trick_step, trick_outside = operators(trick, steps)
    print(f"reference: step {step:.2f} ms, outside operators {outside:.2f} ms ({outside / step:.1%})")
    print(f"trick:     step {trick_step:.2f} ms, outside operators {trick_outside:.2f} ms")
    parts = {
        "convolutions and matmuls": sum(v for k, v in ref_ms.items()
                                        if (k.startswith("aten::") and "convolution" in k) or k in MATMULS),
        "elementwise": sum(v for k, v in ref_ms.items() if k in ELEMENTWISE),
        "attention": sum(v for k, v in ref_ms.items()
                         if "scaled_dot_product" in k or "attention" in k or k in ATTENTION),
    }
    for name, part in parts.items():
        print(f"  {name:26s} {part:8.2f} ms = {part / step:6.1%} of the step: at most {1 / (1 - part / step):.2f}x")
    changed = [(ms.get(k, 0) - ref_ms.get(k, 0), calls.get(k, 0) - ref_calls.get(k, 0), k)
               for k in set(ms) | set(ref_ms) if abs(calls.get(k, 0) - ref_calls.get(k, 0)) >= 0.5]
    print("  operators whose calls per step changed (self-time change, calls):")
    for d_ms, d_calls, name in sorted(changed, key=lambda c: -abs(c[0]))[:8]:
        print(f"    {name:58s} {d_ms:+8.2f} ms {d_calls:+6.1f}")


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], *(int(a) for a in sys.argv[3:]))

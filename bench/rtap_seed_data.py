"""The RTAP journal's published figures, as printed, for ``bench_rtap_seed.py``.

From *A Task Allocation Method for Stream Processing with Recovery Latency
Constraint*: Table 4 (instance sizes), Table 5 (#b and AET), Tables 6 and 7
(waste) and Table 2 (the sorting metrics of the Fig. 4 example).
"""

from __future__ import annotations

import itertools

INSTANCES = ("S-Tree", "L-Tree", "S-Guru", "L-Guru", "S-Senti", "L-Senti", "S-Rnd", "L-Rnd")
"""Table 5's column order."""

ALPHA = dict(zip(INSTANCES, (0.3, 0.2, 0.3, 0.2, 0.2, 0.2, 0.2, 0.6), strict=True))
SIZE = dict(zip(INSTANCES, (33, 220, 55, 127, 93, 93, 200, 200), strict=True))

SEED_BINS = {  # Table 5, #b
    "NFDH": (36, 149, 38, 89, 47, 54, 125, 198),
    "FFDH": (30, 125, 32, 82, 38, 45, 101, 184),
    "BFDH": (29, 113, 32, 81, 38, 45, 100, 178),
    "RTAP-NF": (44, 165, 39, 84, 43, 56, 142, 201),
    "RTAP-FF": (23, 135, 27, 72, 32, 40, 92, 179),
    "RTAP-BF": (21, 101, 25, 71, 30, 41, 90, 169),
}
SEED_AET = {  # Table 5, AET in ms
    "NFDH": (98, 93, 12, 12, 13, 13, 34, 35),
    "FFDH": (22, 130, 22, 14, 22, 23, 45, 49),
    "BFDH": (11, 131, 17, 14, 18, 16, 49, 50),
    "RTAP-NF": (51, 268, 40, 49, 38, 47, 131, 130),
    "RTAP-FF": (37, 329, 68, 37, 33, 48, 147, 139),
    "RTAP-BF": (37, 305, 33, 42, 35, 48, 141, 128),
}
SEED_WASTE = {  # Tables 6 and 7: W, H, A in % per instance
    "NFDH": ((28, 75, 21), (22, 84, 19), (24, 72, 17), (26, 84, 22), (34, 44, 14), (22, 84, 18),
             (24, 70, 17), (23, 89, 21)),
    "FFDH": ((14, 78, 11), (6, 84, 6), (12, 68, 9), (12, 81, 9), (2, 43, 1), (4, 83, 5),
             (7, 76, 4), (6, 91, 6)),
    "BFDH": ((11, 79, 9), (5, 84, 4), (10, 74, 7), (10, 82, 8), (2, 44, 1), (4, 82, 4),
             (4, 75, 3), (6, 81, 4)),
    "RTAP-NF": ((41, 81, 34), (38, 85, 33), (26, 68, 18), (28, 84, 23), (37, 43, 16),
                (20, 80, 19), (32, 76, 24), (32, 89, 29)),
    "RTAP-FF": ((11, 78, 9), (5, 84, 5), (10, 78, 7), (10, 83, 8), (2, 41, 1), (3, 80, 2),
                (5, 73, 3), (3, 89, 4)),
    "RTAP-BF": ((11, 72, 8), (3, 85, 2), (7, 74, 5), (7, 81, 5), (2, 41, 1), (3, 75, 2),
                (3, 62, 2), (4, 79, 3)),
}  # fmt: skip

TABLE2 = {  # Table 2: task -> (t_v, WUD_v) of the Fig. 4 example, n = 10
    1: (0.5, 0.08), 2: (0.2, 0.32), 3: (0.2, 0.48), 4: (0.8, 0.20), 5: (0.8, 0.20),
    6: (0.5, 0.20), 7: (0.5, 0.20), 8: (0.5, 0.90), 9: (0.5, 0.90), 10: (0.9, 0.00),
}  # fmt: skip


def table2_without_upstream_set() -> list[int]:
    """The tasks of Table 2 whose WUD no upstream set can give (eq. 10, n = 10).

    ``WUD_v = |U_v| / n · Σ_{u ∈ U_v} t_u``; every subset of the other nine
    tasks is tried as ``U_v``, with the printed two decimals as tolerance.
    """
    t = {v: tv for v, (tv, _) in TABLE2.items()}
    n, missing = len(TABLE2), []
    for v, (_, wud) in TABLE2.items():
        others = [u for u in TABLE2 if u != v]
        subsets = (c for k in range(n) for c in itertools.combinations(others, k))
        if not any(abs(len(c) * sum(t[u] for u in c) / n - wud) < 0.005 for c in subsets):
            missing.append(v)
    return missing

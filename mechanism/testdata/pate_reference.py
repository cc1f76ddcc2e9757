#!/usr/bin/python3
"""Reference values for the data-dependent analysis (PATE 2018).

Computes, with numpy/scipy and independently of the Go code, the formulas of
Papernot et al. 2018 ("Scalable Private Learning with PATE"): Proposition 7
(log q), Proposition 8 (data-independent RDP), Theorem 6 with Proposition 10
(data-dependent RDP), the threshold test, q0, the local sensitivity bounds of
appendix C, the GNSS RDP (Theorem 23), and the classic RDP → (ε, δ)
conversion. Writes pate_reference.json next to this file.

Run: /usr/bin/python3 mechanism/testdata/pate_reference.py
"""
import json, math, os
import numpy as np
import scipy.stats, scipy.special, scipy.optimize

def logq_gaussian(counts, sigma):
    counts = np.asarray(counts, dtype=float)
    top = int(np.argmax(counts))
    gaps = np.delete(counts[top] - counts, top)
    if len(gaps) == 0:
        return -math.inf
    lq = scipy.special.logsumexp(scipy.stats.norm.logsf(gaps, scale=math.sqrt(2) * sigma))
    return min(lq, math.log(1 - 1 / len(counts)))

def log1mexp(x):
    if x < -1:
        return math.log1p(-math.exp(x))
    if x < 0:
        return math.log(-math.expm1(x))
    return -math.inf

def rdp_gaussian(logq, sigma, orders):
    orders = np.asarray(orders, dtype=float)
    if logq == -math.inf:
        return np.zeros_like(orders)
    var = sigma ** 2
    mu2 = math.sqrt(var * -logq)
    mu1 = mu2 + 1
    ret = orders / var
    mask = (mu1 > orders) & (mu2 > 1)
    if not mu2 > 1:
        return ret
    e1, e2 = mu1 / var, mu2 / var
    if np.any(mask) and logq <= (mu2 - 1) * e2 - mu2 * (math.log(1 + 1 / (mu1 - 1)) + math.log(1 + 1 / (mu2 - 1))) and -logq > e2:
        l1q = log1mexp(logq)
        la = (orders - 1) * (l1q - log1mexp((logq + e2) * (1 - 1 / mu2)))
        lb = (orders - 1) * (e1 - logq / (mu1 - 1))
        s = np.logaddexp(l1q + la, logq + lb) / (orders - 1)
        ret[mask] = np.minimum(ret, s)[mask]
    return ret

def eps_classic(orders, rdp, delta):
    e = np.asarray(rdp) - math.log(delta) / (np.asarray(orders) - 1)
    return float(np.min(e))

def logpr_answered(t, sigma1, counts):
    return float(scipy.stats.norm.logsf(t - max(counts), scale=sigma1))

def rdp_threshold(logpr, sigma1, orders):
    return rdp_gaussian(min(logpr, log1mexp(logpr)), math.sqrt(2) * sigma1, orders)

def dd_bound(sigma, logq, order):
    var = sigma ** 2
    mu2 = sigma * math.sqrt(-logq); mu1 = mu2 + 1
    e1, e2 = mu1 / var, mu2 / var
    l1q = np.log1p(-math.exp(logq))
    la = (order - 1) * (l1q - np.log1p(-math.exp((logq + e2) * (1 - 1 / mu2))))
    lb = (order - 1) * (e1 - logq / (mu1 - 1))
    return float(np.logaddexp(l1q + la, logq + lb) / (order - 1))

def logq0(sigma, order):
    f = lambda lq: dd_bound(sigma, lq, order) - order / sigma ** 2
    ub = min(-(1 + 1 / sigma) ** 2, -((order - .99) / sigma) ** 2, -1 / sigma ** 2)
    if f(ub) < 0:
        return ub
    lb = 2 * ub
    while f(lb) > 0:
        lb *= 1.5
    return scipy.optimize.brentq(f, lb, ub, xtol=1e-14, rtol=1e-15)

def bl(q, sigma, m):
    return (m - 1) / 2 * scipy.special.erfc(1 / sigma + scipy.special.erfcinv(2 * q / (m - 1)))

def bu(q, sigma, m):
    return min(1, (m - 1) / 2 * scipy.special.erfc(-1 / sigma + scipy.special.erfcinv(2 * q / (m - 1))))

def ls_gnmax(votes, teachers, sigma, order):
    m = len(votes)
    q0 = logq0(sigma, order); q1 = math.log(bl(math.exp(q0), sigma, m))
    rdp = lambda lq: order / sigma ** 2 if lq >= q0 else dd_bound(sigma, lq, order)
    def ls(lq):
        if q1 <= lq <= q0:
            lq = q1
        b = rdp(lq)
        return max(rdp(math.log(bu(math.exp(lq), sigma, m))) - b, b - rdp(math.log(bl(math.exp(lq), sigma, m))))
    res = np.full(teachers, ls(q1))
    lq = logq_gaussian(votes, sigma)
    if q1 <= lq <= q0:
        return res
    v = sorted(votes, reverse=True)
    res[0] = ls(lq); d = 0
    left = lq > q0
    while (left and lq > q0 and v[1] > 0) or (not left and lq < q1):
        d += 1
        if d >= teachers:
            break
        if left:
            v[0] += 1; v[1] -= 1; i = 1
            while i < len(v) - 1 and v[i] < v[i + 1]:
                v[i], v[i + 1] = v[i + 1], v[i]; i += 1
        else:
            v[0] -= 1; v[1] += 1
        lq = logq_gaussian(v, sigma)
        res[d] = ls(lq)
    return res

def gnss_rdp(beta, sigma, order):
    return order * math.exp(2 * beta) / sigma ** 2 + (-.5 * math.log(1 - 2 * order * beta) + beta * order) / (order - 1)

rng = np.random.default_rng(20180215)
orders = [1.5, 2, 3, 5, 8, 10, 16, 20, 32, 50, 64, 100, 128, 256, 512, 1000]
cases = []
for k in range(60):
    m = int(rng.choice([2, 3, 10]))
    teachers = int(rng.choice([50, 100, 250]))
    sigma = float(rng.choice([2.0, 5.0, 20.0, 40.0, 100.0]))
    # histograms from concentrated to spread
    conc = rng.uniform(0.05, 5)
    p = rng.dirichlet([conc] * m)
    h = [int(x) for x in rng.multinomial(teachers, p)]
    lq = logq_gaussian(h, sigma)
    cases.append(dict(hist=h, teachers=teachers, sigma=sigma, logq=lq,
                      rdp=list(rdp_gaussian(lq, sigma, orders)),
                      rdp_ind=list(np.asarray(orders) / sigma ** 2)))
# Unanimous and split extremes.
for h, s in [([250, 0, 0], 40.0), ([125, 125], 40.0), ([200, 30, 20], 20.0), ([1000] + [0] * 9, 10.0)]:
    lq = logq_gaussian(h, s)
    cases.append(dict(hist=h, teachers=sum(h), sigma=s, logq=lq, rdp=list(rdp_gaussian(lq, s, orders)), rdp_ind=list(np.asarray(orders) / s ** 2)))

# Composition and conversion over all cases with one σ.
batch = [c["hist"] for c in cases if c["sigma"] == 40.0]
tot = sum(rdp_gaussian(logq_gaussian(h, 40.0), 40.0, orders) for h in batch)
composition = dict(sigma=40.0, hists=batch, rdp=list(tot), delta=1e-5, eps_classic=eps_classic(orders, tot, 1e-5),
                   eps_classic_ind=eps_classic(orders, len(batch) * np.asarray(orders) / 1600.0, 1e-5))

thresholds = []
for h, t, s1 in [([200, 30, 20], 150.0, 100.0), ([60, 50, 40], 150.0, 100.0), ([250, 0, 0], 200.0, 50.0), ([10, 5], 300.0, 150.0)]:
    lp = logpr_answered(t, s1, h)
    thresholds.append(dict(hist=h, threshold=t, sigma1=s1, logpr=lp, rdp=list(rdp_threshold(lp, s1, orders))))

q0s = [dict(sigma=s, order=o, logq0=logq0(s, o)) for s in [5.0, 20.0, 40.0, 100.0] for o in [2.0, 5.0, 10.0, 20.0, 50.0]]

ls_cases = []
for h, s, o in [([200, 30, 20], 40.0, 10.0), ([120, 100, 30], 40.0, 20.0), ([250, 0, 0], 40.0, 20.0), ([100, 90, 60], 20.0, 5.0), ([80, 20] + [0] * 8, 20.0, 10.0)]:
    ls_cases.append(dict(hist=h, teachers=250 if sum(h) == 250 else 100, sigma=s, order=o, ls=list(ls_gnmax(h, 250 if sum(h) == 250 else 100, s, o))))

def ls_threshold(counts, teachers, t, sigma1, order):
    rdp = [float(rdp_threshold(logpr_answered(t, sigma1, [v]), sigma1, [order])[0]) for v in range(teachers + 1)]
    def step(v):
        out = None
        if v > 0:
            out = abs(rdp[v - 1] - rdp[v])
        if v < teachers:
            up = abs(rdp[v + 1] - rdp[v])
            out = up if out is None else max(out, up)
        return out
    cur = int(round(max(counts)))
    ls = np.zeros(teachers)
    for d in range(max(cur, teachers - cur)):
        vals = []
        if cur + d <= teachers:
            vals.append(step(cur + d))
        if cur - d >= 0:
            vals.append(step(cur - d))
        ls[d] = max(vals)
    return ls

ls_threshold_cases = []
for h, teachers, t, s1, o in [([200, 30, 20], 250, 200.0, 150.0, 20.0), ([60, 30, 10], 100, 80.0, 40.0, 10.0), ([250, 0], 250, 150.0, 100.0, 5.0)]:
    ls_threshold_cases.append(dict(hist=h, teachers=teachers, threshold=t, sigma1=s1, order=o, ls=list(ls_threshold(h, teachers, t, s1, o))))

gnss = [dict(beta=b, sigma=s, order=o, rdp=gnss_rdp(b, s, o)) for b, s, o in [(0.02, 10.0, 20.0), (0.04, 5.0, 10.0), (0.001, 100.0, 50.0)]]

out = dict(orders=orders, gnmax=cases, composition=composition, threshold=thresholds, logq0=q0s, local_sensitivity=ls_cases, local_sensitivity_threshold=ls_threshold_cases, gnss=gnss)
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "pate_reference.json"), "w") as f:
    json.dump(out, f, indent=1, allow_nan=True)
print("wrote", len(cases), "GNMax cases")

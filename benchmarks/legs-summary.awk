# legs-summary.awk: the summary of envoy-bench.sh's LEGS=N rounds.
#
#   awk -v n=TARGETS -v names="NAME0<TAB>NAME1<TAB>..." -f legs-summary.awk LEGS_FILE
#
# LEGS_FILE has one line per leg: "round proto target req/s p50 p99 errors"
# (round from 0, proto http or grpc, target from 0 (0 is
# envoyproxy/ratelimit), times in ms, errors 0 or 1). For each protocol it
# prints each target's medians over the rounds, then for each target after
# the first its ratios to target 0's leg of the same round (req/s, p99),
# the medians of those ratios, and in how many rounds both halves of the
# goal held (at least 2x the req/s and at most half the p99); then for
# each target between the first and the last (the sluice builds) its
# requests per second as a share of the last target's (the no-op
# handler) in the same round, and their median.
# legs_summary_test.go checks it against a reference in Go.
# median of a[1..c] (sorted in place); 0 when c is 0.
function median(a, c,   i, j, t) {
	if (c == 0) return 0
	for (i = 2; i <= c; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j + 1] = a[j]; a[j + 1] = t }
	return c % 2 ? a[(c + 1) / 2] : (a[c / 2] + a[c / 2 + 1]) / 2
}
function pick(src, p, k, dst,   r, c) { c = 0; for (r = 0; r < rounds; r++) if ((p, k, r) in src) dst[++c] = src[p, k, r]; return c }
BEGIN { split(names, nm, "\t") }
{ rps[$2, $3, $1] = $4; p50[$2, $3, $1] = $5; p99[$2, $3, $1] = $6; bad[$2, $3] += $7; if ($1 + 1 > rounds) rounds = $1 + 1 }
END {
	for (pi = 1; pi <= 2; pi++) {
		p = pi == 1 ? "http" : "grpc"
		printf "\n%s, medians of %d rounds:\n", p, rounds
		printf "%-24s %10s %9s %9s\n", "service", "req/s", "p50 ms", "p99 ms"
		for (k = 0; k < n; k++) {
			c = pick(rps, p, k, a); mr = median(a, c)
			c = pick(p50, p, k, a); m50 = median(a, c)
			c = pick(p99, p, k, a); m99 = median(a, c)
			printf "%-24s %10.0f %9.2f %9.2f%s\n", nm[k + 1], mr, m50, m99, bad[p, k] ? "  (" bad[p, k] " legs with errors)" : ""
		}
		for (k = 1; k < n; k++) {
			c = 0; met = 0; line = ""
			for (r = 0; r < rounds; r++) {
				if (!((p, k, r) in rps) || !((p, 0, r) in rps) || rps[p, 0, r] <= 0 || p99[p, 0, r] <= 0) continue
				c++
				x[c] = rps[p, k, r] / rps[p, 0, r]; y[c] = p99[p, k, r] / p99[p, 0, r]
				if (x[c] >= 2 && y[c] <= 0.5) met++
				line = line sprintf(" %.2fx/%.2f", x[c], y[c])
			}
			printf "%s / envoyproxy/ratelimit, per round (req/s ratio / p99 ratio):%s\n", nm[k + 1], line
			if (c == 0) printf "  no round with both legs\n"
			else printf "  median %.2fx, p99 %.2f; both halves of the goal held in %d of %d rounds\n", median(x, c), median(y, c), met, c
		}
		# Each sluice build beside the last target (the no-op handler).
		for (k = 1; k < n - 1; k++) {
			c = 0; line = ""
			for (r = 0; r < rounds; r++) {
				if (!((p, k, r) in rps) || !((p, n - 1, r) in rps) || rps[p, n - 1, r] <= 0) continue
				c++
				x[c] = rps[p, k, r] / rps[p, n - 1, r]
				line = line sprintf(" %.0f%%", 100 * x[c])
			}
			printf "%s / %s, per round (req/s):%s\n", nm[k + 1], nm[n], line
			if (c == 0) printf "  no round with both legs\n"
			else printf "  median %.0f%%\n", 100 * median(x, c)
		}
	}
}

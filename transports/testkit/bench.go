package testkit

import (
	"slices"
	"time"
)

// Quantile returns the q-quantile (0 <= q < 1) of d; 0.5 is the median.
func Quantile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(float64(len(s))*q)]
}

package testkit

import (
	"errors"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Quantile returns the q-quantile (0 <= q < 1) of d; 0.5 is the median.
func Quantile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[int(float64(len(s))*q)]
}

// Compare is the A/B benchmarks' loop: two ways of doing the same thing
// timed alternately, so both see the same machine state. After warm pairs
// of warm-up it runs a and c once each per b.Loop iteration, either going
// first every other time (the second of a pair finds caches warmer), and
// returns the durations of each; ns/op is one pair. a and c return how long
// their run took: Timed makes such a function of one that does not.
func Compare(b *testing.B, warm int, a, c func() time.Duration) (aD, cD []time.Duration) {
	for range warm {
		a()
		c()
	}
	for i := 0; b.Loop(); i++ {
		if i%2 == 0 {
			cD = append(cD, c())
			aD = append(aD, a())
		} else {
			aD = append(aD, a())
			cD = append(cD, c())
		}
	}
	return aD, cD
}

// Timed returns a function that runs f and returns how long it took.
func Timed(f func()) func() time.Duration {
	return func() time.Duration {
		t0 := time.Now()
		f()
		return time.Since(t0)
	}
}

// ReportAdded reports the median of each side, as aName-p50-UNIT and
// cName-p50-UNIT, and a's minus c's, as added-p50-UNIT: what a adds to c.
// unit is time.Nanosecond, time.Microsecond or time.Millisecond.
func ReportAdded(b *testing.B, unit time.Duration, aName string, aD []time.Duration, cName string, cD []time.Duration) {
	pa, pc := reportMedians(b, unit, aName, aD, cName, cD)
	b.ReportMetric(in(pa-pc, unit), "added-p50-"+unitName(unit))
}

// ReportRatio reports the median of each side, as aName-p50-UNIT and
// cName-p50-UNIT, and a's over c's as the metric ratio.
func ReportRatio(b *testing.B, unit time.Duration, aName string, aD []time.Duration, cName string, cD []time.Duration, ratio string) {
	pa, pc := reportMedians(b, unit, aName, aD, cName, cD)
	b.ReportMetric(float64(pa)/float64(pc), ratio)
}

// ReportQuantile reports the q-quantile of d as name-pQ-UNIT (p90 for 0.9).
func ReportQuantile(b *testing.B, unit time.Duration, name string, d []time.Duration, q float64) {
	b.ReportMetric(in(Quantile(d, q), unit), name+"-p"+strconv.Itoa(int(q*100+0.5))+"-"+unitName(unit))
}

func reportMedians(b *testing.B, unit time.Duration, aName string, aD []time.Duration, cName string, cD []time.Duration) (pa, pc time.Duration) {
	pa, pc = Quantile(aD, 0.5), Quantile(cD, 0.5)
	b.ReportMetric(in(pa, unit), aName+"-p50-"+unitName(unit))
	b.ReportMetric(in(pc, unit), cName+"-p50-"+unitName(unit))
	return pa, pc
}

// in is d counted in unit.
func in(d, unit time.Duration) float64 { return float64(d) / float64(unit) }

func unitName(unit time.Duration) string {
	switch unit {
	case time.Nanosecond:
		return "ns"
	case time.Microsecond:
		return "µs"
	case time.Millisecond:
		return "ms"
	}
	panic("testkit: benchmark unit " + unit.String() + " is not ns, µs or ms")
}

// Concurrently runs f(0), …, f(n-1) on n goroutines at once, waits for all,
// and returns their errors joined (nil when none failed).
func Concurrently(n int, f func(i int) error) error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = f(i) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

package state

import (
	"fmt"
	"strings"
	"time"
)

const dayMs = 24 * 3600 * 1000

// HumanMs renders a duration given in milliseconds the way a person reads
// it: "250ms", "30s", "1h30m", "366 days". Error messages carry it next to
// the raw number so a limit reads as a limit, not as 31622400000.
func HumanMs(ms int64) string {
	neg := ""
	if ms < 0 {
		neg, ms = "-", -ms
	}
	if ms >= 2*dayMs {
		if ms%dayMs == 0 {
			return fmt.Sprintf("%s%d days", neg, ms/dayMs)
		}
		return fmt.Sprintf("%s%.1f days", neg, float64(ms)/dayMs)
	}
	return neg + HumanDuration(time.Duration(ms)*time.Millisecond)
}

// HumanDuration is time.Duration's String without its trailing zero
// units ("1h" rather than "1h0m0s").
func HumanDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// HumanBytes renders a size in binary units: "512 bytes", "1 MiB",
// "100.0 MiB".
func HumanBytes(n int64) string {
	units := []string{"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	if n < 1024 && n > -1024 {
		if n == 1 {
			return "1 byte"
		}
		return fmt.Sprintf("%d bytes", n)
	}
	v, unit := float64(n), ""
	exact := true
	for _, u := range units {
		if n%1024 != 0 {
			exact = false
		}
		n /= 1024
		v /= 1024
		unit = u
		if n < 1024 && n > -1024 {
			break
		}
	}
	if exact {
		return fmt.Sprintf("%d %s", int64(v), unit)
	}
	return fmt.Sprintf("%.1f %s", v, unit)
}

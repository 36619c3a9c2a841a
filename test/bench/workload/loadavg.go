package workload

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// LoadAverage is the machine's 1, 5 and 15 minute load averages, as
// /proc/loadavg has them ("3.10 2.80 2.50"): on a shared machine every
// figure is reported next to it.
func LoadAverage() (string, error) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "", fmt.Errorf("load average: %w", err)
	}
	return parseLoadAverage(string(b))
}

func parseLoadAverage(s string) (string, error) {
	f := strings.Fields(s)
	if len(f) < 3 {
		return "", fmt.Errorf("load average: %q has fewer than three fields", s)
	}
	for _, v := range f[:3] {
		if _, err := strconv.ParseFloat(v, 64); err != nil {
			return "", fmt.Errorf("load average: %q: %w", s, err)
		}
	}
	return strings.Join(f[:3], " "), nil
}

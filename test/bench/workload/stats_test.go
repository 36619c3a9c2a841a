package workload

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestPercentileNearestRank(t *testing.T) {
	ms := func(v ...int) []time.Duration {
		out := make([]time.Duration, len(v))
		for i, x := range v {
			out[i] = time.Duration(x) * time.Millisecond
		}
		return out
	}
	hundred := make([]time.Duration, 100)
	for i := range hundred {
		hundred[i] = time.Duration(i+1) * time.Millisecond // 1..100 ms
	}
	thousand := make([]time.Duration, 1000)
	for i := range thousand {
		thousand[i] = time.Duration(i+1) * time.Microsecond
	}
	for _, tc := range []struct {
		name   string
		sorted []time.Duration
		p      float64
		want   time.Duration
	}{
		{"empty", nil, 50, 0},
		{"single", ms(7), 99.9, 7 * time.Millisecond},
		{"median of odd", ms(1, 2, 3, 4, 5), 50, 3 * time.Millisecond},
		{"median of even takes the lower", ms(1, 2, 3, 4), 50, 2 * time.Millisecond},
		{"p99 of 1..100", hundred, 99, 99 * time.Millisecond},
		{"p100 is the max", hundred, 100, 100 * time.Millisecond},
		{"p1 of 1..100", hundred, 1, time.Millisecond},
		{"p99.9 of 1000", thousand, 99.9, 999 * time.Microsecond},
		{"p50 of 1000", thousand, 50, 500 * time.Microsecond},
		{"tiny p clamps to the min", ms(5, 6), 0.0001, 5 * time.Millisecond},
	} {
		if got := Percentile(tc.sorted, tc.p); got != tc.want {
			t.Errorf("%s: Percentile(p%v) = %v, want %v", tc.name, tc.p, got, tc.want)
		}
	}
}

func TestSummarizeSortsAndReportsMilliseconds(t *testing.T) {
	var ds []time.Duration
	for i := 200; i >= 1; i-- { // unsorted on purpose
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	s := Summarize(ds)
	want := LatencySummary{Count: 200, P50: 100, P99: 198, P999: 200, Max: 200, Mean: 100.5}
	if s != want {
		t.Fatalf("Summarize = %+v, want %+v", s, want)
	}
	if (Summarize(nil) != LatencySummary{}) {
		t.Fatal("Summarize(nil) is not zero")
	}
}

func TestLatenciesConcurrentAdd(t *testing.T) {
	var l Latencies
	done := make(chan struct{})
	for g := range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range 100 {
				l.Add(time.Duration(g*100+i+1) * time.Microsecond)
			}
		}()
	}
	for range 8 {
		<-done
	}
	s := l.Summary()
	if s.Count != 800 || s.Max != 0.8 {
		t.Fatalf("summary %+v, want 800 samples with max 0.8 ms", s)
	}
}

func TestParseLimit(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Limit
		off  bool
	}{
		{"10s", Limit{Duration: 10 * time.Second}, false},
		{"1m30s", Limit{Duration: 90 * time.Second}, false},
		{"50000", Limit{Messages: 50000}, false},
		{"0", Limit{}, true},
		{"", Limit{}, true},
	} {
		got, err := ParseLimit(tc.in)
		if err != nil {
			t.Errorf("ParseLimit(%q): %v", tc.in, err)
			continue
		}
		if got != tc.want || got.Off() != tc.off {
			t.Errorf("ParseLimit(%q) = %+v (off %v), want %+v (off %v)", tc.in, got, got.Off(), tc.want, tc.off)
		}
		if !tc.off && got.String() != tc.in {
			t.Errorf("Limit(%q).String() = %q", tc.in, got.String())
		}
	}
	for _, bad := range []string{"ten", "-5", "-1s", "5x"} {
		if _, err := ParseLimit(bad); err == nil {
			t.Errorf("ParseLimit(%q) accepted", bad)
		}
	}
}

func TestPayloadRoundTrip(t *testing.T) {
	p := NewPayloads(1024)
	k := MakeKey(3, 17, 1<<40+5)
	at := time.Unix(1700000000, 123456789)
	b := p.Make(k, at)
	if len(b) != 1024 {
		t.Fatalf("payload is %d bytes, want 1024", len(b))
	}
	gk, gat, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if gk != k || !gat.Equal(at) {
		t.Fatalf("Parse = %v %v, want %v %v", gk, gat, k, at)
	}
	if k.Phase() != 3 || k.Producer() != 17 || k.Seq() != 1<<40+5 {
		t.Fatalf("key fields %d %d %d", k.Phase(), k.Producer(), k.Seq())
	}
	if _, _, err := Parse(b[:10]); err == nil {
		t.Fatal("Parse accepted a short payload")
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config invalid: %v", err)
	}
	c := DefaultConfig()
	c.PayloadSize, c.Window = 8, 0
	if err := c.Validate(); err == nil {
		t.Fatal("payload of 8 bytes and window 0 accepted")
	}
}

func TestParseClients(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []string
		err  string
	}{
		{"unary,batch,sdk", []string{ClientUnary, ClientBatch, ClientSDK}, ""},
		{" sdk , unary ", []string{ClientSDK, ClientUnary}, ""},
		{"unary,unary", []string{ClientUnary}, ""},
		{"unary,stream", nil, `client kind "stream"`},
		{" , ", nil, "no client kind"},
	} {
		got, err := ParseClients(tc.in)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseClients(%q) = %v, %v; want error %q", tc.in, got, err, tc.err)
			}
			continue
		}
		if err != nil || !slices.Equal(got, tc.want) {
			t.Errorf("ParseClients(%q) = %v, %v; want %v", tc.in, got, err, tc.want)
		}
	}
	for _, tc := range []struct {
		name string
		edit func(*Config)
		err  string
	}{
		{"no client kind", func(c *Config) { c.Clients = nil }, "no client kind"},
		{"unknown kind", func(c *Config) { c.Clients = []string{"grpcurl"} }, `client kind "grpcurl"`},
		{"paced without a rate", func(c *Config) { c.PacedRate = 0 }, "paced rate 0"},
	} {
		c := DefaultConfig()
		tc.edit(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%s: Validate = %v, want %q", tc.name, err, tc.err)
		}
	}
	c := DefaultConfig()
	c.PacedRate, c.Paced = 0, Limit{}
	if err := c.Validate(); err != nil {
		t.Errorf("paced phase off needs no rate: %v", err)
	}
}

package checkpoint

import (
	"strings"
	"testing"
)

func TestKeyString(t *testing.T) {
	tests := []struct {
		name string
		key  Key
		want string
		scan string
	}{
		{"plain", Key{Pipeline: "p", Kind: KindOnce, Flow: "f"}, "p/once/f/", "p/once/f/"},
		{"with_name", Key{Pipeline: "p", Kind: KindFirstOffsets, Flow: "f", Name: "orders/3"}, "p/first_offsets/f/orders%2F3", "p/first_offsets/f/"},
		{"escapes", Key{Pipeline: "a%b", Kind: "k\x00", Flow: "x\x7f", Name: "ü"}, "a%25b/k%00/x%7F/ü", "a%25b/k%00/x%7F/"},
		{"pipeline_prefix", Key{Pipeline: "p"}, "p///", "p/"},
		{"hole", Key{Pipeline: "p", Flow: "f"}, "p//f/", "p/"},
		{"empty", Key{}, "///", ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.key.String(); got != tc.want {
				t.Fatalf("String() = %q, want %q", got, tc.want)
			}
			if got := tc.key.ScanPrefix(); got != tc.scan {
				t.Fatalf("ScanPrefix() = %q, want %q", got, tc.scan)
			}
			back, err := ParseKey(tc.want)
			if err != nil || back != tc.key {
				t.Fatalf("ParseKey(%q) = %+v, %v; want %+v", tc.want, back, err, tc.key)
			}
		})
	}
}

func TestParseKeyRefuses(t *testing.T) {
	tests := []struct{ name, in string }{
		{"three_parts", "p/once/f"},
		{"five_parts", "p/once/f/n/x"},
		{"cut_escape", "p/once/f/%2"},
		{"lowercase_hex", "p/once/f/%2f"},
		{"needless_escape", "p/once/f/%41"},
		{"raw_control", "p/once/f/\x01"},
		{"bad_hex", "p/once/f/%ZZ"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if k, err := ParseKey(tc.in); err == nil {
				t.Fatalf("ParseKey(%q) = %+v, want an error", tc.in, k)
			}
		})
	}
}

func TestMatches(t *testing.T) {
	k := Key{Pipeline: "p", Kind: KindFirstOffsets, Flow: "f", Name: "t/0"}
	tests := []struct {
		name   string
		prefix Key
		want   bool
	}{
		{"everything", Key{}, true},
		{"pipeline", Key{Pipeline: "p"}, true},
		{"other_pipeline", Key{Pipeline: "px"}, false},
		{"flow_any_kind", Key{Pipeline: "p", Flow: "f"}, true},
		{"other_flow", Key{Pipeline: "p", Flow: "g"}, false},
		{"name", Key{Pipeline: "p", Name: "t/0"}, true},
		{"other_name", Key{Pipeline: "p", Name: "t/1"}, false},
		{"exact", k, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.prefix.Matches(k); got != tc.want {
				t.Fatalf("%+v.Matches(%+v) = %v, want %v", tc.prefix, k, got, tc.want)
			}
			if tc.want && !strings.HasPrefix(k.String(), tc.prefix.ScanPrefix()) {
				t.Fatalf("ScanPrefix %q does not lead %q", tc.prefix.ScanPrefix(), k.String())
			}
		})
	}
}

func FuzzKeyRoundTrip(f *testing.F) {
	f.Add("p", "once", "f", "")
	f.Add("a/b", "%", "\x00\x7f", "ü/3")
	f.Fuzz(func(t *testing.T, p, kind, flow, name string) {
		k := Key{Pipeline: p, Kind: kind, Flow: flow, Name: name}
		s := k.String()
		back, err := ParseKey(s)
		if err != nil || back != k {
			t.Fatalf("ParseKey(%q) = %+v, %v; want %+v", s, back, err, k)
		}
		if strings.Count(s, "/") != 3 {
			t.Fatalf("%q has %d separators, want 3", s, strings.Count(s, "/"))
		}
		if !strings.HasPrefix(s, k.ScanPrefix()) {
			t.Fatalf("ScanPrefix %q does not lead %q", k.ScanPrefix(), s)
		}
	})
}

func FuzzParseKey(f *testing.F) {
	f.Add("p/once/f/")
	f.Add("a%25b/k%00/x%7F/ü")
	f.Fuzz(func(t *testing.T, s string) {
		k, err := ParseKey(s)
		if err != nil {
			return
		}
		if k.String() != s {
			t.Fatalf("ParseKey(%q) = %+v, which prints as %q", s, k, k.String())
		}
	})
}

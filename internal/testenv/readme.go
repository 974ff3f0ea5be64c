package testenv

import (
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// CheckREADME compares the output block that follows intro in the README
// at path with what a command printed, line by line, their figures aside
// (times, numbers, addresses, keys, hashes): README shows what the
// program prints today. A block's lines starting with "$ " (the command
// typed) are not output.
func CheckREADME(t testing.TB, path, intro, got string) {
	t.Helper()
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(readme), intro)
	if !ok {
		t.Fatalf("%s has no %q", path, intro)
	}
	_, block, ok := strings.Cut(after, "```\n")
	if block, _, ok = strings.Cut(block, "```"); !ok {
		t.Fatalf("%s has no output block after %q", path, intro)
	}
	want, have := Shapes(block), Shapes(got)
	if !slices.Equal(want, have) {
		t.Errorf("%s's output after %q is not what the program prints:\nREADME:\n%s\nprinted:\n%s", path, intro, strings.Join(want, "\n"), strings.Join(have, "\n"))
	}
}

// Shapes are the lines of out, less those of a typed command ("$ ..."),
// with their figures replaced by placeholders.
func Shapes(out string) []string {
	var lines []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(l, "$ ") {
			continue
		}
		for _, r := range figures {
			l = r.re.ReplaceAllString(l, r.with)
		}
		lines = append(lines, l)
	}
	return lines
}

var figures = []struct {
	re   *regexp.Regexp
	with string
}{
	{regexp.MustCompile(`time=\S+`), "time=T"},
	{regexp.MustCompile(`\b[0-9a-f]{64}\b`), "SHA"},
	{regexp.MustCompile(`\b([0-9a-f]{2}:){5}[0-9a-f]{2}\b`), "MAC"},
	{regexp.MustCompile(`\b\d+\.\d+\.\d+\.\d+\b`), "IP"},
	{regexp.MustCompile(`0x[0-9a-f]+`), "0xH"},
	{regexp.MustCompile(`\d+(\.\d+)?(ms|µs|us|ns|s)?\b`), "N"},
}

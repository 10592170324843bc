package main

import (
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"strings"
	"time"
	"unicode/utf8"
)

// Report is a finished run: where it ran, with which seed, and the
// results in table order. It is what --json writes.
type Report struct {
	Target       string    `json:"target"`
	ClosedTarget string    `json:"closed_target,omitempty"`
	StrictTarget string    `json:"strict_target,omitempty"`
	Seed         uint64    `json:"seed"`
	Started      time.Time `json:"started"`
	Results      []Result  `json:"results"`
	Passed       int       `json:"passed"`
	Failed       int       `json:"failed"`
	Skipped      int       `json:"skipped"`
}

// NewReport counts the outcomes of results.
func NewReport(cfg *Config, started time.Time, results []Result) Report {
	r := Report{Target: cfg.Target, ClosedTarget: cfg.Closed, StrictTarget: cfg.Strict, Seed: cfg.Seed, Started: started.UTC(), Results: results}
	for _, res := range results {
		switch res.Outcome {
		case Pass:
			r.Passed++
		case Fail:
			r.Failed++
		case Skip:
			r.Skipped++
		}
	}
	return r
}

// WriteTable prints the PASS/FAIL table: one row per case, then for a
// failure each broken assertion (what was expected, what came back), and
// notes such as skip reasons, then a summary line.
func (r Report) WriteTable(w io.Writer) error {
	idW, nameW := len("ID"), len("NAME")
	for _, res := range r.Results {
		idW, nameW = max(idW, len(res.ID)), max(nameW, utf8.RuneCountInString(res.Name))
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%-*s  %-*s  %s\n", idW, "ID", nameW, "NAME", "RESULT")
	for _, res := range r.Results {
		fmt.Fprintf(&b, "%-*s  %-*s  %s\n", idW, res.ID, nameW, res.Name, res.Outcome)
		for _, f := range res.Failures {
			fmt.Fprintf(&b, "%*s- %s\n", idW+2, "", f)
		}
		for _, n := range res.Notes {
			fmt.Fprintf(&b, "%*snote: %s\n", idW+2, "", n)
		}
	}
	fmt.Fprintf(&b, "%d passed, %d failed, %d skipped\n", r.Passed, r.Failed, r.Skipped)
	if _, err := io.WriteString(w, b.String()); err != nil {
		return fmt.Errorf("atk: write table: %w", err)
	}
	return nil
}

// WriteJSON writes the report as one indented JSON document.
func (r Report) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	if err := enc.Encode(r); err != nil {
		return fmt.Errorf("atk: write json: %w", err)
	}
	return nil
}

// JUnit XML, as read by Jenkins, GitLab and GitHub test reporters.
type junitSuites struct {
	XMLName xml.Name     `xml:"testsuites"`
	Suites  []junitSuite `xml:"testsuite"`
}

type junitSuite struct {
	Name      string      `xml:"name,attr"`
	Tests     int         `xml:"tests,attr"`
	Failures  int         `xml:"failures,attr"`
	Skipped   int         `xml:"skipped,attr"`
	Time      float64     `xml:"time,attr"`
	Timestamp string      `xml:"timestamp,attr"`
	Props     []junitProp `xml:"properties>property"`
	Cases     []junitCase `xml:"testcase"`
}

type junitProp struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

type junitCase struct {
	Name      string        `xml:"name,attr"`
	Classname string        `xml:"classname,attr"`
	Time      float64       `xml:"time,attr"`
	Failure   *junitMessage `xml:"failure"`
	Skipped   *junitMessage `xml:"skipped"`
}

type junitMessage struct {
	Message string `xml:"message,attr"`
	Text    string `xml:",chardata"`
}

// WriteJUnit writes the report as a JUnit XML test suite named "atk", one
// testcase per case ("ATK-01 missing X-User-Id").
func (r Report) WriteJUnit(w io.Writer) error {
	s := junitSuite{
		Name: "atk", Tests: len(r.Results), Failures: r.Failed, Skipped: r.Skipped,
		Timestamp: r.Started.Format(time.RFC3339),
		Props: []junitProp{
			{Name: "target", Value: r.Target},
			{Name: "closed_target", Value: r.ClosedTarget},
			{Name: "strict_target", Value: r.StrictTarget},
			{Name: "seed", Value: fmt.Sprint(r.Seed)},
		},
	}
	for _, res := range r.Results {
		c := junitCase{Name: res.ID + " " + res.Name, Classname: "atk", Time: res.Duration.Seconds()}
		s.Time += c.Time
		switch res.Outcome {
		case Fail:
			c.Failure = &junitMessage{Message: res.Failures[0], Text: strings.Join(res.Failures, "\n")}
		case Skip:
			c.Skipped = &junitMessage{Message: strings.Join(res.Notes, "; ")}
		}
		s.Cases = append(s.Cases, c)
	}
	if _, err := io.WriteString(w, xml.Header); err != nil {
		return fmt.Errorf("atk: write junit: %w", err)
	}
	enc := xml.NewEncoder(w)
	enc.Indent("", "  ")
	if err := enc.Encode(junitSuites{Suites: []junitSuite{s}}); err != nil {
		return fmt.Errorf("atk: write junit: %w", err)
	}
	_, err := io.WriteString(w, "\n")
	return err
}

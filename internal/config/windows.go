package config

import (
	"fmt"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// This file holds the keys of the window kinds beyond tumbling, sliding and
// session (calendar, global, early firings) and of top_k, apart from the
// rest so that each reads on its own.

// windowTypes are the values of window.type.
var windowTypes = []string{"tumbling", "sliding", "session", "global", "count"}

// calendarUnits are the values of window.calendar.
var calendarUnits = []string{"day", "week", "month"}

// maxTopK bounds top_k's k: a result lists k values, and one beyond a few
// thousand is a dump of the window, not a top list.
const maxTopK = 10_000

// hasFixedSize reports whether the window is sized by window.size (and
// slide and offset): tumbling without a calendar, and sliding.
func (c *Config) hasFixedSize() bool {
	w := c.Window
	return w.Type == "sliding" || w.Type == "tumbling" && w.Calendar == ""
}

// inapplicableWindowKind is inapplicable for the keys this file adds and
// for the keys that calendar and global windows rule out.
func (c *Config) inapplicableWindowKind(key string) string {
	w := c.Window
	switch {
	case key == "window.calendar" && w.Type != "tumbling":
		return "applies only to window.type tumbling"
	case key == "window.timezone" && w.Calendar == "":
		return "applies only to calendar windows (window.calendar set)"
	case (key == "window.size" || key == "window.offset") && w.Type == "tumbling" && w.Calendar != "":
		return "does not apply to calendar windows: their length is the calendar's, in window.timezone"
	case (key == "window.size" || key == "window.offset") && w.Type == "global":
		return "does not apply to window.type global (one window per key that never ends)"
	case (key == "window.allowed_lateness" || key == "window.emit") && w.Type == "global":
		return "does not apply to window.type global: nothing is late, and it fires only through window.early_firings"
	case key == "window.early_firings.time" && w.EarlyFirings.Every == 0 && w.EarlyFirings.Time == "":
		return "applies only when window.early_firings.every is set"
	case key == "window.slide" && w.Type == "count" && w.Slide == 0:
		return "0 is no slide: leave window.slide out for count windows that do not overlap"
	case key == "window.timeout" && w.Type != "count":
		return "applies only to window.type count"
	case w.Type == "count" && (key == "window.offset" || key == "window.allowed_lateness" || key == "window.emit" || strings.HasPrefix(key, "window.early_firings.")):
		return "does not apply to window.type count: nothing is late in a count window, and it fires when full (or at its timeout)"
	}
	return ""
}

// countKeys are the keys that hold a number of records in count windows.
var countKeys = []string{"window.size", "window.slide"}

// isRecords reports whether key holds a number of records in c: size and
// slide of a count window (held as that many ms).
func (c *Config) isRecords(key string) bool {
	return c.Window.Type == "count" && slices.Contains(countKeys, key)
}

// setRecords sets the duration v to text ms if key may hold a number of
// records and text is one (a whole number); validation then checks that
// the window is a count window.
func setRecords(v reflect.Value, key, text string) bool {
	n, ok := records(text)
	if !ok || !slices.Contains(countKeys, key) {
		return false
	}
	v.SetInt(int64(time.Duration(n) * time.Millisecond))
	return true
}

// records parses a whole number of records.
func records(text string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(text), 10, 64)
	return n, err == nil && n >= 0 && n <= math.MaxInt64/int64(time.Millisecond)
}

// validateCount checks the keys of count windows, and that other windows
// have durations where count windows have numbers of records.
func (c *Config) validateCount(src *sources) *KeyError {
	w := c.Window
	for _, key := range countKeys {
		text, written := src.text[key]
		_, isNumber := records(text)
		switch {
		case w.Type != "count" && written && isNumber && text != "0":
			return &KeyError{Key: key, Value: text, Reason: "must be a duration such as 0, 500ms, 1s250ms or 1h"}
		case w.Type == "count" && written && !isNumber:
			return &KeyError{Key: key, Value: text, Reason: "must be a whole number of records for window.type count, such as 100"}
		}
	}
	if w.Type != "count" {
		return nil
	}
	size, slide := w.Size.Milliseconds(), w.Slide.Milliseconds()
	if size <= 0 {
		return &KeyError{Key: "window.size", Value: strconv.FormatInt(size, 10), Reason: "required for window.type count: a positive number of records, such as 100"}
	}
	if src.present["window.slide"] && (slide <= 0 || slide > size) {
		return &KeyError{Key: "window.slide", Value: strconv.FormatInt(slide, 10), Reason: fmt.Sprintf("must be a number of records above 0, at most window.size (%d)", size)}
	}
	if err := notNegative("window.timeout", w.Timeout); err != nil {
		return err
	}
	if w.Timeout > 0 && slide > 0 && slide != size {
		return &KeyError{Key: "window.timeout", Value: formatDuration(w.Timeout), Reason: "applies only to count windows without window.slide (a timeout fires a partial window; sliding count windows fire every slide records)"}
	}
	return nil
}

// validateWindowKind checks calendar windows, global windows and early
// firings, and fills in their defaults (timezone UTC, time processing).
func (c *Config) validateWindowKind(src *sources) *KeyError {
	w := &c.Window
	if err := c.checkApplies(src, "window.slide", "window.calendar", "window.timezone", "window.allowed_lateness", "window.emit", "window.early_firings.every", "window.early_firings.time", "window.timeout"); err != nil {
		return err
	}
	if err := c.validateCount(src); err != nil {
		return err
	}
	if w.Calendar != "" {
		if err := oneOf("window.calendar", w.Calendar, calendarUnits...); err != nil {
			return err
		}
		if w.Timezone == "" {
			w.Timezone = "UTC"
		}
		if _, err := time.LoadLocation(w.Timezone); err != nil || w.Timezone == "Local" {
			return &KeyError{Key: "window.timezone", Value: w.Timezone, Reason: "must be an IANA time zone name such as Europe/Berlin or UTC"}
		}
	}
	ef := &w.EarlyFirings
	if err := notNegative("window.early_firings.every", ef.Every); err != nil {
		return err
	}
	if ef.Every > 0 && ef.Time == "" {
		ef.Time = "processing"
	}
	if ef.Time != "" {
		if err := oneOf("window.early_firings.time", ef.Time, "processing", "event"); err != nil {
			return err
		}
	}
	if w.Type == "global" && ef.Every == 0 {
		return &KeyError{Key: "window.early_firings.every", Value: formatDuration(ef.Every), Reason: "required for window.type global, which fires only through early firings: a positive duration such as 1m"}
	}
	return nil
}

// Zone returns the time zone of calendar windows: nil unless window.calendar
// is set (the config is validated, so the name loads).
func (w Window) Zone() *time.Location {
	if w.Calendar == "" {
		return nil
	}
	loc, err := time.LoadLocation(w.Timezone)
	if err != nil {
		panic(fmt.Sprintf("config: window.timezone %q was validated but does not load: %v", w.Timezone, err))
	}
	return loc
}

// validateTopK checks aggregate a (at key) if it is a top_k.
func validateTopK(a Aggregate, key string) *KeyError {
	if a.Fn != "top_k" || a.K > 0 && a.K <= maxTopK {
		return nil
	}
	return &KeyError{Key: key + ".k", Value: strconv.Itoa(a.K), Reason: "required for fn top_k: a whole number from 1 to " + strconv.Itoa(maxTopK) + ", such as 10"}
}

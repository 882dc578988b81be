package config

import (
	"fmt"
	"strconv"
	"time"
)

// This file holds the keys of the window kinds beyond tumbling, sliding and
// session (calendar, global, early firings) and of top_k, apart from the
// rest so that each reads on its own.

// windowTypes are the values of window.type.
var windowTypes = []string{"tumbling", "sliding", "session", "global"}

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
	}
	return ""
}

// validateWindowKind checks calendar windows, global windows and early
// firings, and fills in their defaults (timezone UTC, time processing).
func (c *Config) validateWindowKind(src *sources) *KeyError {
	w := &c.Window
	if err := c.checkApplies(src, "window.calendar", "window.timezone", "window.allowed_lateness", "window.emit", "window.early_firings.time"); err != nil {
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

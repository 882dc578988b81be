package config

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
)

// envPrefix starts the name of every environment override.
const envPrefix = "AGGREGATOR_"

// envName is the variable that overrides key: window.size is
// AGGREGATOR_WINDOW_SIZE.
func envName(key string) string {
	return envPrefix + strings.ToUpper(strings.ReplaceAll(key, ".", "_"))
}

// applyEnv overrides every scalar and string-list key whose AGGREGATOR_*
// variable is set and not empty. The keys come from Config's yaml tags.
// Lists of objects (aggregates, source.filter) cannot be overridden.
func (s *sources) applyEnv(c *Config, getenv func(string) string) error {
	return s.envStruct(reflect.ValueOf(c).Elem(), "", getenv)
}

func (s *sources) envStruct(v reflect.Value, path string, getenv func(string) string) error {
	for i := range v.NumField() {
		f, key := v.Field(i), join(path, tagName(v.Type().Field(i)))
		var err error
		switch {
		case f.Kind() == reflect.Map:
			err = s.envMap(f, key, getenv)
		case f.Type() == durationType || f.Kind() != reflect.Struct && f.Kind() != reflect.Slice:
			err = s.envScalar(f, key, getenv)
		case f.Kind() == reflect.Struct:
			err = s.envStruct(f, key, getenv)
		case f.Type().Elem().Kind() == reflect.String:
			err = s.envList(f, key, getenv)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *sources) envScalar(v reflect.Value, key string, getenv func(string) string) error {
	name := envName(key)
	text := getenv(name)
	if text == "" {
		return nil
	}
	s.set(key, text, name)
	if reason := setText(v, text); reason != "" && !setRecords(v, key, text) {
		return &KeyError{Key: key, Value: text, Reason: reason, Env: name}
	}
	return nil
}

// envList sets a string list from a comma-separated value; spaces around
// items are trimmed.
func (s *sources) envList(v reflect.Value, key string, getenv func(string) string) error {
	name := envName(key)
	text := getenv(name)
	if text == "" {
		return nil
	}
	s.set(key, text, name)
	items := strings.Split(text, ",")
	for i := range items {
		items[i] = strings.TrimSpace(items[i])
		s.set(fmt.Sprintf("%s[%d]", key, i), items[i], name)
	}
	v.Set(reflect.ValueOf(items))
	return nil
}

// envMap sets a map of names to values from "name=value,name=value";
// spaces around items are trimmed.
func (s *sources) envMap(v reflect.Value, key string, getenv func(string) string) error {
	name := envName(key)
	text := getenv(name)
	if text == "" {
		return nil
	}
	s.set(key, text, name)
	m := map[string]string{}
	for item := range strings.SplitSeq(text, ",") {
		k, val, ok := strings.Cut(strings.TrimSpace(item), "=")
		if _, dup := m[k]; !ok || k == "" || dup {
			return &KeyError{Key: key, Value: text, Reason: "must be name=value pairs separated by commas, each name once", Env: name}
		}
		m[k] = val
	}
	v.Set(reflect.ValueOf(m))
	return nil
}

func (s *sources) set(key, text, env string) {
	s.present[key] = true
	s.text[key] = text
	s.env[key] = env
}

// CheckEnv returns an error, wrapping ErrInvalid, for the first AGGREGATOR_*
// variable in environ ("NAME=value" entries, as os.Environ returns them)
// that overrides no key, naming the known variable nearest to it: a typo in
// a variable would otherwise be ignored as silently as it is caught in the
// file. Empty variables count as unset, as for the overrides. Values are
// never shown: the variable may hold a password.
func CheckEnv(environ []string) error {
	known := envNames()
	for _, kv := range environ {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) || value == "" || slices.Contains(known, name) {
			continue
		}
		for _, objects := range []string{"aggregates", "source.filter"} {
			if name == envName(objects) {
				return fmt.Errorf("%w: %s: %s is a list of objects and cannot be overridden; set it in the file", ErrInvalid, name, objects)
			}
		}
		nearest := known[0]
		for _, k := range known[1:] {
			if editDistance(name, k) < editDistance(name, nearest) {
				nearest = k
			}
		}
		return fmt.Errorf("%w: %s: no config key has this variable (did you mean %s?)", ErrInvalid, name, nearest)
	}
	return nil
}

// envNames lists the variable of every key that can be overridden, in
// the order of the keys in Config.
func envNames() []string {
	var names []string
	c := defaults()
	// No variable is set, so applyEnv only asks for each name.
	_ = newSources().applyEnv(&c, func(name string) string {
		names = append(names, name)
		return ""
	})
	return names
}

package main

import (
	"testing"
)

func TestMemoryLimit(t *testing.T) {
	tests := map[string]struct {
		env     []string
		want    int64
		wantErr bool
	}{
		"512Mi limit":           {[]string{"CONTAINER_MEMORY_LIMIT=536870912"}, 483183820, false},
		"GOMEMLIMIT wins":       {[]string{"CONTAINER_MEMORY_LIMIT=536870912", "GOMEMLIMIT=400MiB"}, 0, false},
		"no limit given":        {nil, 0, false},
		"not a number of bytes": {[]string{"CONTAINER_MEMORY_LIMIT=512Mi"}, 0, true},
		"zero":                  {[]string{"CONTAINER_MEMORY_LIMIT=0"}, 0, true},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := memoryLimit(lookupEnv(tt.env))
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("memoryLimit(%q) = %d, %v; want %d, error %v", tt.env, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

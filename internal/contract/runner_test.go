package contract

import (
	"reflect"
	"testing"
)

// TestRunnerStatsAdd: Add sums every figure, so a field added to
// RunnerStats and left out of Add fails here.
func TestRunnerStatsAdd(t *testing.T) {
	var a, b RunnerStats
	av, bv := reflect.ValueOf(&a).Elem(), reflect.ValueOf(&b).Elem()
	for i := range av.NumField() {
		switch f := av.Field(i); f.Kind() {
		case reflect.Int:
			f.SetInt(int64(i + 1))
			bv.Field(i).SetInt(100)
		case reflect.Uint64:
			f.SetUint(uint64(i + 1))
			bv.Field(i).SetUint(100)
		case reflect.String:
			f.SetString("uring")
			bv.Field(i).SetString("epoll")
		default:
			t.Fatalf("RunnerStats.%s: a %s; teach Add and this test about it", av.Type().Field(i).Name, f.Kind())
		}
	}
	sum := reflect.ValueOf(a.Add(b))
	for i := range sum.NumField() {
		name := sum.Type().Field(i).Name
		switch f := sum.Field(i); f.Kind() {
		case reflect.Int:
			if f.Int() != int64(i+1)+100 {
				t.Errorf("Add: %s = %d, want %d", name, f.Int(), i+1+100)
			}
		case reflect.Uint64:
			if f.Uint() != uint64(i+1)+100 {
				t.Errorf("Add: %s = %d, want %d", name, f.Uint(), i+1+100)
			}
		case reflect.String:
			if f.String() != "uring" {
				t.Errorf("Add: %s = %q, want the receiver's", name, f.String())
			}
		}
	}
}

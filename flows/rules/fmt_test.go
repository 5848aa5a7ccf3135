package rules

import (
	"fmt"
	"strconv"
)

func strconvF(x float64) string { return strconv.FormatFloat(x, 'g', -1, 64) }
func fmtSprint(v any) string    { return fmt.Sprint(v) }

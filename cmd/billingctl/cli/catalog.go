package cli

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/usagebilling/billing/pkg/api/meterapi"
	"github.com/usagebilling/billing/pkg/auth"
)

// The catalog commands: the installation's meters, defined by a
// catalog-admin and read by any role (GET /v1/meters has no tenant).
func init() {
	register(
		&command{name: "meter define", args: "CODE", short: "define a catalog meter: its aggregation, value property, dimensions and CloudEvents type (once; never changed)", role: auth.RoleCatalogAdmin, flags: meterDefine},
		&command{name: "meter list", short: "the catalog's meters (a viewer of -tenant, or catalog-admin)", role: auth.RoleCatalogAdmin, roleFor: catalogReader, flags: listCommand(listSpec{
			service: "meter", path: "/v1/meters", key: "meters",
			cols: meterColumns,
		})},
		&command{name: "meter show", args: "CODE", short: "one catalog meter (a viewer of -tenant, or catalog-admin)", role: auth.RoleCatalogAdmin, roleFor: catalogReader, flags: meterShow},
	)
}

// catalogReader is the role a read of the catalog signs: viewer when a
// tenant is configured (the least a tenant's user holds), else
// catalog-admin, the one role without a tenant that reads the catalog and
// is no operator's.
func catalogReader(_ *flag.FlagSet, tenant string) string {
	if tenant != "" {
		return auth.RoleViewer
	}
	return auth.RoleCatalogAdmin
}

var meterColumns = []column{col("CODE", "code"), col("AGGREGATION", "aggregation"), col("VALUE PROPERTY", "valueProperty"),
	col("DIMENSIONS", "dimensions"), col("EVENT TYPE", "eventType"), col("DEFINED AT", "definedAt")}

// meterFields are the fields `meter define` and `meter show` print.
var meterFields = []string{"code", "name", "aggregation", "valueProperty", "dimensions", "eventType", "implied", "definedAt", "eventId"}

// namesFlag collects a repeatable flag's values in order.
type namesFlag []string

func (n *namesFlag) String() string { return strings.Join(*n, ",") }

func (n *namesFlag) Set(v string) error {
	if v == "" {
		return fmt.Errorf("an empty name")
	}
	*n = append(*n, v)
	return nil
}

func meterDefine(fs *flag.FlagSet) runFunc {
	var dims namesFlag
	name := fs.String("name", "", "the meter's name, for people (required)")
	aggregation := fs.String("aggregation", "", "sum, count, max, latest or unique_count (required)")
	valueProperty := fs.String("value-property", "", "the property unique_count counts distinct values of (required there); for CloudEvents, the data member holding the quantity")
	fs.Var(&dims, "dimension", "a property the meter can be grouped and priced by; repeat, at most 5")
	eventType := fs.String("event-type", "", "the CloudEvents type that feeds the meter, unique across meters (default: its code)")
	key := fs.String("idempotency-key", "", "the Idempotency-Key (default: derived from the request, so a rerun replays)")
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args, "CODE"); err != nil {
			return err
		}
		if *name == "" || *aggregation == "" {
			return usagef("-name and -aggregation are required")
		}
		req := meterapi.DefineMeterRequest{Code: args[0], Name: *name, Aggregation: meterapi.Aggregation(*aggregation)}
		if *valueProperty != "" {
			req.ValueProperty = valueProperty
		}
		if len(dims) > 0 {
			req.Dimensions = (*[]string)(&dims)
		}
		if *eventType != "" {
			req.EventType = eventType
		}
		return c.command(ctx, call{service: "meter", method: http.MethodPost, path: "/v1/meters", body: req}, *key, meterFields...)
	}
}

func meterShow(fs *flag.FlagSet) runFunc {
	return func(ctx context.Context, c *Client, args []string) error {
		if err := positional(args, "CODE"); err != nil {
			return err
		}
		var v map[string]any
		if _, err := c.decode(ctx, call{service: "meter", method: http.MethodGet, path: "/v1/meters/" + url.PathEscape(args[0])}, &v); err != nil {
			return err
		}
		return c.object(v, meterFields...)
	}
}

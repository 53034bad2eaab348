// Package crdgen generates CustomResourceDefinitions with structural OpenAPI
// v3 schemas from Go API types by reflection.
//
// It exists so that the test cluster can serve KubeVirt's and CDI's resources
// with schemas that prune or reject misspelt fields, without vendoring the
// projects' own (very large, generated-from-comments) CRD manifests. The
// schema is derived from what encoding/json would accept for the Go type, so
// anything a typed client can write round-trips, and anything it cannot
// express is pruned by the API server.
//
// Rules (see SchemaFor):
//   - structs become "type: object" with one property per JSON field, following
//     encoding/json: json tags, "-" skipped, unexported fields skipped,
//     embedded structs (with no tag name, or the Kubernetes ",inline" tag)
//     flattened, with shallower fields winning name clashes;
//   - pointers are followed; slices and arrays become "type: array";
//     []byte becomes "type: string, format: byte"; maps become "type: object"
//     with additionalProperties;
//   - resource.Quantity and intstr.IntOrString become
//     x-kubernetes-int-or-string with anyOf integer/string;
//   - metav1.Time and metav1.MicroTime become "type: string, format: date-time",
//     metav1.Duration a string;
//   - metav1.ObjectMeta becomes "type: object" at the root (the API server owns
//     metadata there) and "type: object" preserving unknown fields when nested
//     (object templates), as KubeVirt's and CDI's own CRDs do, so that template
//     labels and annotations are kept;
//   - runtime.RawExtension, apiextensionsv1.JSON, interface types, and types
//     with a custom MarshalJSON whose shape cannot be known by reflection become
//     "x-kubernetes-preserve-unknown-fields: true";
//   - types that describe themselves with the Kubernetes OpenAPISchemaType /
//     OpenAPISchemaFormat / OpenAPIV3OneOfTypes methods use that description;
//   - encoding.TextMarshaler types become strings;
//   - a type that contains itself is cut at the second occurrence with
//     "type: object" preserving unknown fields.
package crdgen

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
)

var (
	typeQuantity     = reflect.TypeFor[resource.Quantity]()
	typeIntOrString  = reflect.TypeFor[intstr.IntOrString]()
	typeTime         = reflect.TypeFor[metav1.Time]()
	typeMicroTime    = reflect.TypeFor[metav1.MicroTime]()
	typeDuration     = reflect.TypeFor[metav1.Duration]()
	typeObjectMeta   = reflect.TypeFor[metav1.ObjectMeta]()
	typeRawExtension = reflect.TypeFor[runtime.RawExtension]()
	typeJSON         = reflect.TypeFor[apiextensionsv1.JSON]()

	typeJSONMarshaler = reflect.TypeFor[json.Marshaler]()
	typeTextMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
	typeSchemaTyper   = reflect.TypeFor[interface{ OpenAPISchemaType() []string }]()
	typeSchemaFormat  = reflect.TypeFor[interface{ OpenAPISchemaFormat() string }]()
	typeOneOfTyper    = reflect.TypeFor[interface{ OpenAPIV3OneOfTypes() []string }]()
)

// SchemaFor returns the structural schema of the root object of a custom
// resource whose Go type is t (a struct, or a pointer to one). The root's
// metadata is "type: object" only, as the API server requires.
func SchemaFor(t reflect.Type) (*apiextensionsv1.JSONSchemaProps, error) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("crdgen: root type %s is a %s, not a struct", t, t.Kind())
	}
	g := &generator{onPath: map[reflect.Type]bool{}}
	s := g.schema(t, true)
	if g.err != nil {
		return nil, g.err
	}
	return s, nil
}

type generator struct {
	onPath map[reflect.Type]bool
	err    error
}

func preserveUnknown() *apiextensionsv1.JSONSchemaProps {
	t := true
	return &apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &t}
}

func anyValue() *apiextensionsv1.JSONSchemaProps {
	t := true
	return &apiextensionsv1.JSONSchemaProps{XPreserveUnknownFields: &t}
}

func intOrString() *apiextensionsv1.JSONSchemaProps {
	return &apiextensionsv1.JSONSchemaProps{
		XIntOrString: true,
		AnyOf: []apiextensionsv1.JSONSchemaProps{
			{Type: "integer"},
			{Type: "string"},
		},
	}
}

func implements(t, iface reflect.Type) bool {
	return t.Implements(iface) || reflect.PointerTo(t).Implements(iface)
}

// methodValue calls the no-argument method name on the zero value of t.
func methodValue(t reflect.Type, name string) reflect.Value {
	v := reflect.New(t)
	m := v.MethodByName(name)
	return m.Call(nil)[0]
}

// schema returns the schema of a value of type t. root is true only for the
// custom resource's own top-level type.
func (g *generator) schema(t reflect.Type, root bool) *apiextensionsv1.JSONSchemaProps {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if s := g.knownTypeSchema(t); s != nil {
		return s
	}
	switch t.Kind() {
	case reflect.Interface:
		return anyValue()
	case reflect.Slice, reflect.Array:
		return g.listSchema(t)
	case reflect.Map:
		return g.mapSchema(t)
	case reflect.Struct:
		if g.onPath[t] {
			return preserveUnknown()
		}
		g.onPath[t] = true
		defer delete(g.onPath, t)
		return g.structSchema(t, root)
	}
	if s := scalarSchema(t.Kind()); s != nil {
		return s
	}
	g.fail(fmt.Errorf("crdgen: type %s (kind %s) cannot be encoded as JSON", t, t.Kind()))
	return anyValue()
}

// knownTypeSchema is the schema of a type with its own encoding: the
// Kubernetes types the API server knows, and types that describe or
// marshal themselves; nil for others.
func (g *generator) knownTypeSchema(t reflect.Type) *apiextensionsv1.JSONSchemaProps {
	switch t {
	case typeQuantity, typeIntOrString:
		return intOrString()
	case typeTime, typeMicroTime:
		return &apiextensionsv1.JSONSchemaProps{Type: "string", Format: "date-time"}
	case typeDuration:
		return &apiextensionsv1.JSONSchemaProps{Type: "string"}
	case typeObjectMeta:
		// Only reached for nested metadata: the root's is handled in
		// structSchema.
		return preserveUnknown()
	case typeRawExtension, typeJSON:
		return anyValue()
	}
	if implements(t, typeSchemaTyper) {
		return g.selfDescribed(t)
	}
	if implements(t, typeJSONMarshaler) {
		// A custom encoding we cannot see through: keep whatever it writes.
		return anyValue()
	}
	if implements(t, typeTextMarshaler) {
		return &apiextensionsv1.JSONSchemaProps{Type: "string"}
	}
	return nil
}

// scalarSchema is the schema of a boolean, number or string kind; nil for
// other kinds.
func scalarSchema(k reflect.Kind) *apiextensionsv1.JSONSchemaProps {
	switch k {
	case reflect.Bool:
		return &apiextensionsv1.JSONSchemaProps{Type: "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uintptr:
		return &apiextensionsv1.JSONSchemaProps{Type: "integer"}
	case reflect.Int32, reflect.Uint32:
		return &apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int32"}
	case reflect.Int64, reflect.Uint64:
		return &apiextensionsv1.JSONSchemaProps{Type: "integer", Format: "int64"}
	case reflect.Float32, reflect.Float64:
		return &apiextensionsv1.JSONSchemaProps{Type: "number"}
	case reflect.String:
		return &apiextensionsv1.JSONSchemaProps{Type: "string"}
	}
	return nil
}

// listSchema is the schema of a slice or array: base64 for bytes.
func (g *generator) listSchema(t reflect.Type) *apiextensionsv1.JSONSchemaProps {
	if t.Elem().Kind() == reflect.Uint8 && !implements(t.Elem(), typeJSONMarshaler) && !implements(t.Elem(), typeTextMarshaler) {
		return &apiextensionsv1.JSONSchemaProps{Type: "string", Format: "byte"}
	}
	return &apiextensionsv1.JSONSchemaProps{
		Type:  "array",
		Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: g.schema(t.Elem(), false)},
	}
}

// mapSchema is the schema of a map, an object of its values; its keys
// must encode as strings.
func (g *generator) mapSchema(t reflect.Type) *apiextensionsv1.JSONSchemaProps {
	if k := t.Key(); k.Kind() != reflect.String && !implements(k, typeTextMarshaler) {
		// encoding/json also accepts integer keys; they are strings on the wire.
		switch k.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		default:
			g.fail(fmt.Errorf("crdgen: map key type %s of %s cannot be encoded as JSON", k, t))
			return anyValue()
		}
	}
	return &apiextensionsv1.JSONSchemaProps{
		Type: "object",
		AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{
			Allows: true,
			Schema: g.schema(t.Elem(), false),
		},
	}
}

func (g *generator) fail(err error) {
	if g.err == nil {
		g.err = err
	}
}

// selfDescribed uses the Kubernetes OpenAPI self-description methods of t.
func (g *generator) selfDescribed(t reflect.Type) *apiextensionsv1.JSONSchemaProps {
	var format string
	if implements(t, typeSchemaFormat) {
		format = methodValue(t, "OpenAPISchemaFormat").String()
	}
	var oneOf []string
	if implements(t, typeOneOfTyper) {
		oneOf = methodValue(t, "OpenAPIV3OneOfTypes").Interface().([]string)
	}
	if format == "int-or-string" || (slices.Contains(oneOf, "integer") && slices.Contains(oneOf, "string")) {
		return intOrString()
	}
	types := methodValue(t, "OpenAPISchemaType").Interface().([]string)
	if len(types) != 1 {
		return anyValue()
	}
	return &apiextensionsv1.JSONSchemaProps{Type: types[0], Format: format}
}

// jsonField is one JSON property of a struct, after flattening embedded
// structs the way encoding/json does.
type jsonField struct {
	name     string
	typ      reflect.Type
	depth    int
	tagged   bool
	asString bool
}

// jsonFields lists the JSON properties of struct type t in declaration
// order, resolving name clashes like encoding/json: the shallowest field
// wins; among equally deep ones a tagged field wins; otherwise all are
// dropped.
func jsonFields(t reflect.Type) []jsonField {
	var all []jsonField
	var walk func(t reflect.Type, depth int, seen map[reflect.Type]bool)
	walk = func(t reflect.Type, depth int, seen map[reflect.Type]bool) {
		if seen[t] {
			return
		}
		seen[t] = true
		defer delete(seen, t)
		for i := range t.NumField() {
			f := t.Field(i)
			tag := f.Tag.Get("json")
			if tag == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tag, ",")
			ft := f.Type
			if f.Anonymous {
				et := ft
				if et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				if !f.IsExported() && et.Kind() != reflect.Struct {
					continue
				}
				if name == "" && et.Kind() == reflect.Struct {
					walk(et, depth+1, seen)
					continue
				}
			} else if !f.IsExported() {
				continue
			}
			jf := jsonField{name: name, typ: ft, depth: depth, tagged: name != ""}
			if jf.name == "" {
				jf.name = f.Name
			}
			for o := range strings.SplitSeq(opts, ",") {
				if o == "string" {
					switch ft.Kind() {
					case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
						reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64,
						reflect.Float32, reflect.Float64, reflect.String:
						jf.asString = true
					}
				}
			}
			all = append(all, jf)
		}
	}
	walk(t, 0, map[reflect.Type]bool{})

	byName := map[string][]int{}
	for i, f := range all {
		byName[f.name] = append(byName[f.name], i)
	}
	var out []jsonField
	for i, f := range all {
		idx := byName[f.name]
		if len(idx) == 1 {
			out = append(out, f)
			continue
		}
		if idx[0] != i {
			continue // already decided at the first occurrence
		}
		if w, ok := dominant(all, idx); ok {
			out = append(out, w)
		}
	}
	return out
}

func dominant(all []jsonField, idx []int) (jsonField, bool) {
	minDepth := all[idx[0]].depth
	for _, i := range idx {
		minDepth = min(minDepth, all[i].depth)
	}
	var cands []jsonField
	for _, i := range idx {
		if all[i].depth == minDepth {
			cands = append(cands, all[i])
		}
	}
	if len(cands) == 1 {
		return cands[0], true
	}
	var tagged []jsonField
	for _, c := range cands {
		if c.tagged {
			tagged = append(tagged, c)
		}
	}
	if len(tagged) == 1 {
		return tagged[0], true
	}
	return jsonField{}, false
}

func (g *generator) structSchema(t reflect.Type, root bool) *apiextensionsv1.JSONSchemaProps {
	s := &apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{}}
	for _, f := range jsonFields(t) {
		var fs *apiextensionsv1.JSONSchemaProps
		switch {
		case f.asString:
			fs = &apiextensionsv1.JSONSchemaProps{Type: "string"}
		case root && f.name == "metadata" && deref(f.typ) == typeObjectMeta:
			fs = &apiextensionsv1.JSONSchemaProps{Type: "object"}
		default:
			fs = g.schema(f.typ, false)
		}
		s.Properties[f.name] = *fs
	}
	if len(s.Properties) == 0 {
		// An empty struct marshals as {}: accept exactly that.
		s.Properties = nil
	}
	return s
}

func deref(t reflect.Type) reflect.Type {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t
}

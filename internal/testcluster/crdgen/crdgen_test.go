package crdgen

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"sigs.k8s.io/yaml"
)

type Inner struct {
	A string `json:"a"`
}

type Embedded struct {
	FromEmbedded int32  `json:"fromEmbedded,omitempty"`
	Clash        string `json:"clash"`
}

type Recursive struct {
	Name     string      `json:"name"`
	Children []Recursive `json:"children,omitempty"`
}

type customJSON struct{ x int }

func (customJSON) MarshalJSON() ([]byte, error) { return []byte(`"x"`), nil }

type selfDescribed struct{ s string }

func (selfDescribed) MarshalJSON() ([]byte, error)  { return []byte(`""`), nil }
func (selfDescribed) OpenAPISchemaType() []string   { return []string{"string"} }
func (selfDescribed) OpenAPISchemaFormat() string   { return "ipv4" }
func (*selfDescribed) UnmarshalJSON(b []byte) error { return nil }

type Root struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Embedded          `json:",inline"`
	*Inner
	Clash       int    `json:"clash"`
	Ptr         *Inner `json:"ptr,omitempty"`
	Skipped     string `json:"-"`
	unexported  string
	Untagged    bool
	Count       uint64                       `json:"count"`
	Ratio       float64                      `json:"ratio"`
	AsString    int                          `json:"asString,string"`
	Bytes       []byte                       `json:"bytes"`
	List        []*Inner                     `json:"list"`
	Labels      map[string]string            `json:"labels"`
	Nested      map[string][]Inner           `json:"nested"`
	Quantity    resource.Quantity            `json:"quantity"`
	QuantityPtr *resource.Quantity           `json:"quantityPtr"`
	Port        intstr.IntOrString           `json:"port"`
	When        metav1.Time                  `json:"when"`
	Micro       *metav1.MicroTime            `json:"micro"`
	Timeout     metav1.Duration              `json:"timeout"`
	Template    metav1.ObjectMeta            `json:"template"`
	Raw         runtime.RawExtension         `json:"raw"`
	JSON        *apiextensionsv1.JSON        `json:"json"`
	Any         any                          `json:"any"`
	Custom      customJSON                   `json:"custom"`
	Self        selfDescribed                `json:"self"`
	Tree        Recursive                    `json:"tree"`
	Empty       struct{}                     `json:"empty"`
	ByInt       map[int32]string             `json:"byInt"`
	Fixed       [2]string                    `json:"fixed"`
	Conditions  []metav1.Condition           `json:"conditions"`
	Selector    *metav1.LabelSelector        `json:"selector"`
	Resources   map[string]resource.Quantity `json:"resources"`
}

func TestSchemaFor(t *testing.T) {
	s, err := SchemaFor(reflect.TypeFor[*Root]())
	if err != nil {
		t.Fatal(err)
	}
	yes := true
	str := apiextensionsv1.JSONSchemaProps{Type: "string"}
	inner := apiextensionsv1.JSONSchemaProps{Type: "object", Properties: map[string]apiextensionsv1.JSONSchemaProps{"a": str}}
	intOrStr := apiextensionsv1.JSONSchemaProps{XIntOrString: true, AnyOf: []apiextensionsv1.JSONSchemaProps{{Type: "integer"}, {Type: "string"}}}
	preserveObj := apiextensionsv1.JSONSchemaProps{Type: "object", XPreserveUnknownFields: &yes}
	preserveAny := apiextensionsv1.JSONSchemaProps{XPreserveUnknownFields: &yes}
	dateTime := apiextensionsv1.JSONSchemaProps{Type: "string", Format: "date-time"}
	tests := map[string]apiextensionsv1.JSONSchemaProps{
		"apiVersion":   str,
		"kind":         str,
		"metadata":     {Type: "object"},
		"fromEmbedded": {Type: "integer", Format: "int32"},
		"clash":        {Type: "integer"}, // the shallower field wins
		"a":            str,               // from the embedded *Inner
		"ptr":          inner,
		"Untagged":     {Type: "boolean"},
		"count":        {Type: "integer", Format: "int64"},
		"ratio":        {Type: "number"},
		"asString":     str,
		"bytes":        {Type: "string", Format: "byte"},
		"list":         {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &inner}},
		"labels":       {Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &str}},
		"quantity":     intOrStr,
		"quantityPtr":  intOrStr,
		"port":         intOrStr,
		"when":         dateTime,
		"micro":        dateTime,
		"timeout":      str,
		"template":     preserveObj,
		"raw":          preserveAny,
		"json":         preserveAny,
		"any":          preserveAny,
		"custom":       preserveAny,
		"self":         {Type: "string", Format: "ipv4"},
		"empty":        {Type: "object"},
		"byInt":        {Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &str}},
		"fixed":        {Type: "array", Items: &apiextensionsv1.JSONSchemaPropsOrArray{Schema: &str}},
		"resources":    {Type: "object", AdditionalProperties: &apiextensionsv1.JSONSchemaPropsOrBool{Allows: true, Schema: &intOrStr}},
	}
	for name, want := range tests {
		got, ok := s.Properties[name]
		if !ok {
			t.Errorf("property %q missing", name)
			continue
		}
		if !reflect.DeepEqual(got, want) {
			gy, _ := yaml.Marshal(got)
			wy, _ := yaml.Marshal(want)
			t.Errorf("property %q:\ngot\n%s\nwant\n%s", name, gy, wy)
		}
	}
	for _, absent := range []string{"Skipped", "-", "unexported", "Embedded", "Inner", "TypeMeta", "ObjectMeta"} {
		if _, ok := s.Properties[absent]; ok {
			t.Errorf("property %q should not exist", absent)
		}
	}

	// Recursion is cut at the second occurrence of a type.
	tree := s.Properties["tree"]
	if got := tree.Properties["children"].Items.Schema; !reflect.DeepEqual(*got, preserveObj) {
		t.Errorf("recursive children = %+v, want an object preserving unknown fields", got)
	}
	// Library types are described field by field.
	cond := s.Properties["conditions"].Items.Schema
	if cond.Properties["lastTransitionTime"].Format != "date-time" || cond.Properties["observedGeneration"].Format != "int64" {
		t.Errorf("metav1.Condition schema = %+v", cond)
	}
	if sel := s.Properties["selector"]; sel.Properties["matchExpressions"].Items == nil {
		t.Errorf("LabelSelector schema = %+v", sel)
	}
}

func TestSchemaForRejectsUnencodableTypes(t *testing.T) {
	type bad struct {
		F func() `json:"f"`
	}
	if _, err := SchemaFor(reflect.TypeFor[bad]()); err == nil {
		t.Error("SchemaFor accepted a func field")
	}
	if _, err := SchemaFor(reflect.TypeFor[string]()); err == nil {
		t.Error("SchemaFor accepted a non-struct root")
	}
}

// TestGeneratedFilesUpToDate fails when internal/testcluster/crds does not
// match what the generator produces from the current Go types.
func TestGeneratedFilesUpToDate(t *testing.T) {
	files, err := Render(Definitions())
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join("..", "crds")
	onDisk, err := filepath.Glob(filepath.Join(dir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(onDisk) != len(files) {
		t.Errorf("%s holds %d YAML files, the generator makes %d", dir, len(onDisk), len(files))
	}
	for name, want := range files {
		got, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s is stale (read error: %v); run: go generate ./internal/testcluster", filepath.Join(dir, name), err)
		}
	}
}

package main

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

// A trimmed file in the shape cdktf generates: a resource with a required
// attribute, an optional+computed one, a computed-only one, a computed list of
// objects, a single block, a set block and timeouts.
const fixtureTS = `export interface ThingConfig {
}
export function thingSingleToHclTerraform(struct?: any): any {
  const attrs = {
    mode: {
      value: cdktf.stringToHclTerraform(struct!.mode),
      isBlock: false,
      type: "simple",
      storageClassType: "string",
    },
  };
}
export class ThingSingleOutputReference extends cdktf.ComplexObject {
  // mode - computed: false, optional: true, required: false
  private _mode?: string; 
  public get mode() {
    return this.getStringAttribute('mode');
  }
}
export function thingItemToHclTerraform(struct?: any): any {
  const attrs = {
    tags: {
      value: cdktf.listMapperHcl(cdktf.stringToHclTerraform, false)(struct!.tags),
      isBlock: false,
      type: "set",
      storageClassType: "stringList",
    },
  };
}
export class ThingItemOutputReference extends cdktf.ComplexObject {
  // tags - computed: false, optional: false, required: true
  private _tags?: string[]; 
  public get tags() {
    return cdktf.Fn.tolist(this.getListAttribute('tags'));
  }
}
export class ThingItemList extends cdktf.ComplexList {
}
export class ThingStatusOutputReference extends cdktf.ComplexObject {
  // code - computed: true, optional: false, required: false
  public get code() {
    return this.getNumberAttribute('code');
  }
}
export class ThingStatusList extends cdktf.ComplexList {
}
export function thingTimeoutsToHclTerraform(struct?: any): any {
  const attrs = {
    create: {
      value: cdktf.stringToHclTerraform(struct!.create),
      isBlock: false,
      type: "simple",
      storageClassType: "string",
    },
  };
}
export class ThingTimeoutsOutputReference extends cdktf.ComplexObject {
  // create - computed: false, optional: true, required: false
  private _create?: string; 
  public get create() {
    return this.getStringAttribute('create');
  }
}
export class Thing extends cdktf.TerraformResource {
  public static readonly tfResourceType = "google_thing";

  // name - computed: false, optional: false, required: true
  private _name?: string; 
  public get name() {
    return this.getStringAttribute('name');
  }

  // project - computed: true, optional: true, required: false
  private _project?: string; 
  public get project() {
    return this.getStringAttribute('project');
  }

  // uid - computed: true, optional: false, required: false
  public get uid() {
    return this.getStringAttribute('uid');
  }

  // status - computed: true, optional: false, required: false
  private _status = new ThingStatusList(this, "status", false);
  public get status() {
    return this._status;
  }

  // single - computed: false, optional: false, required: true
  private _single = new ThingSingleOutputReference(this, "single");

  // item - computed: false, optional: true, required: false
  private _item = new ThingItemList(this, "item", true);

  // timeouts - computed: false, optional: true, required: false
  private _timeouts = new ThingTimeoutsOutputReference(this, "timeouts");

  protected synthesizeHclAttributes(): { [name: string]: any } {
    const attrs = {
      name: {
        value: cdktf.stringToHclTerraform(this._name),
        isBlock: false,
        type: "simple",
        storageClassType: "string",
      },
      project: {
        value: cdktf.stringToHclTerraform(this._project),
        isBlock: false,
        type: "simple",
        storageClassType: "string",
      },
      single: {
        value: thingSingleToHclTerraform(this._single.internalValue),
        isBlock: true,
        type: "list",
        storageClassType: "ThingSingleList",
      },
      item: {
        value: cdktf.listMapperHcl(thingItemToHclTerraform, true)(this._item.internalValue),
        isBlock: true,
        type: "set",
        storageClassType: "ThingItemList",
      },
      timeouts: {
        value: thingTimeoutsToHclTerraform(this._timeouts.internalValue),
        isBlock: true,
        type: "struct",
        storageClassType: "ThingTimeouts",
      },
    };
  }
}
`

func TestLoadSchema(t *testing.T) {
	sm, _ := json.Marshal(map[string]any{"version": 3, "sourcesContent": []string{fixtureTS}})
	js := "\"use strict\";\n//# sourceMappingURL=data:application/json;base64," + base64.StdEncoding.EncodeToString(sm) + "\n"
	path := filepath.Join(t.TempDir(), "index.js")
	if err := os.WriteFile(path, []byte(js), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := loadSchema(path, "google_thing")
	if err != nil {
		t.Fatal(err)
	}
	want := &schema{Block: &block{
		Attributes: map[string]*attribute{
			"name":    {Type: "string", Required: true},
			"project": {Type: "string", Optional: true, Computed: true},
			"uid":     {Type: "string", Computed: true},
			"status":  {Type: []any{"list", []any{"object", map[string]any{"code": "number"}}}, Computed: true},
		},
		BlockTypes: map[string]*nestedBlock{
			"single": {NestingMode: "list", MinItems: 1, MaxItems: 1, Block: &block{
				Attributes: map[string]*attribute{"mode": {Type: "string", Optional: true}},
				BlockTypes: map[string]*nestedBlock{},
			}},
			"item": {NestingMode: "set", Block: &block{
				Attributes: map[string]*attribute{"tags": {Type: []any{"set", "string"}, Required: true}},
				BlockTypes: map[string]*nestedBlock{},
			}},
			"timeouts": {NestingMode: "single", Block: &block{
				Attributes: map[string]*attribute{"create": {Type: "string", Optional: true}},
				BlockTypes: map[string]*nestedBlock{},
			}},
		},
	}}
	gj, _ := json.MarshalIndent(got, "", " ")
	wj, _ := json.MarshalIndent(want, "", " ")
	var g, w any
	_ = json.Unmarshal(gj, &g)
	_ = json.Unmarshal(wj, &w)
	if !reflect.DeepEqual(g, w) {
		t.Errorf("schema:\n%s\nwant:\n%s", gj, wj)
	}

	if _, err := loadSchema(path, "google_other"); err == nil {
		t.Error("a file of another type was accepted")
	}
}

func TestLibDir(t *testing.T) {
	for _, tc := range []struct {
		local, typ string
		data       bool
		want       string
	}{
		{"google", "google_cloudfunctions2_function", false, "cloudfunctions2-function"},
		{"google", "google_project", true, "data-google-project"},
		{"google-beta", "google_project_service_identity", false, "google-project-service-identity"},
		{"random", "random_password", false, "password"},
		{"random", "random_string", false, "string-resource"},
	} {
		if got := libDir(tc.local, tc.typ, tc.data); got != tc.want {
			t.Errorf("libDir(%s) = %s, want %s", tc.typ, got, tc.want)
		}
	}
}

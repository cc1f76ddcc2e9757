package main

import "github.com/nzcfed/nzc/party/teacher"

// ensembleView is what train and status print with --format json: the
// manifest's facts under snake_case keys. It is its own type so the JSON an
// operator reads can be named freely without touching data.Shape, whose
// untagged encoding is part of the saved model specs and the ensemble cache
// keys.
type ensembleView struct {
	Dir      string         `json:"dir"`
	Teachers int            `json:"teachers"`
	Classes  int            `json:"classes"`
	Shape    shapeView      `json:"shape"`
	Model    string         `json:"model"`
	DataHash string         `json:"data_hash"`
	Examples int            `json:"examples"`
	Files    []string       `json:"files"`
	Check    *teacher.Check `json:"check,omitempty"`
}

type shapeView struct {
	Height   int `json:"height"`
	Width    int `json:"width"`
	Channels int `json:"channels"`
}

func viewEnsemble(m *teacher.Manifest, dir string) ensembleView {
	return ensembleView{
		Dir:      dir,
		Teachers: m.Teachers,
		Classes:  m.Classes,
		Shape:    shapeView{Height: m.Shape.Height, Width: m.Shape.Width, Channels: m.Shape.Channels},
		Model:    m.Model,
		DataHash: m.DataHash,
		Examples: m.Examples,
		Files:    m.Files,
		Check:    m.Check,
	}
}

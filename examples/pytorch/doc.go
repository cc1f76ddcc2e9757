// Package pytorch is the example of a hospital that trains its teachers in
// PyTorch (train_teachers.py) and votes with them as ONNX teachers. Its
// test, in the onnx build, checks that the ONNX teachers vote as the same
// models do in PyTorch; it skips, saying so, where PyTorch is not installed
// (Debian: apt-get install python3-torch), unless NZC_REQUIRE_TORCH is set.
package pytorch

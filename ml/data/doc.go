// Package data loads labelled data sets for teachers and students and splits
// them into disjoint shards.
//
// Three formats are read: the idx format of MNIST and its relatives (a
// directory holding the four standard files, gzipped or not); CSV with one
// record per line, the features first and the integer class label last, for
// tabular hospital data; and a folder of PNG or JPEG images with one
// directory per class (LoadImageFolder), decoded by the standard library.
// Load tells them apart by the path alone; every command that reads data
// reads it through Load. Corrupt or truncated input yields a *FormatError
// that names the file and the problem.
package data

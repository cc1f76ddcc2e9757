// Package model holds the Go-native classifiers teachers and students train:
// softmax regression, multi-layer perceptrons and small convolutional
// networks, trained with minibatch SGD or Adam.
//
// Everything is float32 and every dense and convolution layer is a single
// matrix product per batch (convolutions via im2col), computed by gonum's
// BLAS, which uses every core for large products. Training is deterministic
// for a given seed: initialisation and shuffling come from seeded sources and
// all parallel work writes disjoint outputs. A Network is not safe for
// concurrent use; Clone it for each goroutine.
package model

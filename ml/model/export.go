package model

// Parameters returns copies of the network's trainable tensors in the order
// of its layers: for each convolution block its weights (Filters×K, K =
// Kernel·Kernel·Channels ordered (ky, kx, channel)) and biases, then for
// each dense layer its weights (in×out, row-major) and biases. Exporters
// (ml/onnx) rebuild the network from them and its Spec.
func (n *Network) Parameters() [][]float32 {
	out := make([][]float32, len(n.ps))
	for i, p := range n.ps {
		out[i] = append([]float32(nil), p.w...)
	}
	return out
}

/* The Net's layer sequence (layers.h) and the check of a path's stages. */
#include <stdio.h>

#include "layers.h"

const struct cnn_layer cnn_layers[CNN_LAYERS] = {
	[CNN_CONV1] = { "conv1", CNN_K_CONV3, "conv1.weight", 32, 0.f },
	[CNN_BIAS1] = { "conv1.bias", CNN_K_BIAS, "conv1.bias", 0, 0.f },
	[CNN_RELU1] = { "relu1", CNN_K_RELU, NULL, 0, 0.f },
	[CNN_CONV2] = { "conv2", CNN_K_CONV3, "conv2.weight", 64, 0.f },
	[CNN_BIAS2] = { "conv2.bias", CNN_K_BIAS, "conv2.bias", 0, 0.f },
	[CNN_RELU2] = { "relu2", CNN_K_RELU, NULL, 0, 0.f },
	[CNN_POOL] = { "pool", CNN_K_POOL2, NULL, 0, 0.f },
	[CNN_DROP1] = { "dropout1", CNN_K_DROPOUT, NULL, 0, 0.25f },
	[CNN_FC1] = { "fc1", CNN_K_LINEAR, "fc1.weight", 128, 0.f },
	[CNN_BIAS3] = { "fc1.bias", CNN_K_BIAS, "fc1.bias", 0, 0.f },
	[CNN_RELU3] = { "relu3", CNN_K_RELU, NULL, 0, 0.f },
	[CNN_DROP2] = { "dropout2", CNN_K_DROPOUT, NULL, 0, 0.5f },
	[CNN_FC2] = { "fc2", CNN_K_LINEAR, "fc2.weight", 0, 0.f },
	[CNN_BIAS4] = { "fc2.bias", CNN_K_BIAS, "fc2.bias", 0, 0.f },
	[CNN_NLL] = { "log_softmax+nll", CNN_K_NLL, NULL, 0, 0.f },
};

static const char *layer_name(int l)
{
	return l >= 0 && l < CNN_LAYERS ? cnn_layers[l].name : "(no layer)";
}

int cnn_stages_check(const struct cnn_stage *stages, size_t n, int backward, char *err,
		     size_t errlen)
{
	int step = backward ? -1 : 1;
	int next = backward ? CNN_LAYERS - 1 : 0;   /* the layer the next stage must start at */
	int end = backward ? -1 : CNN_LAYERS;
	for (size_t i = 0; i < n; i++) {
		const struct cnn_stage *s = &stages[i];
		if (next == end) {
			snprintf(err, errlen, "stage %zu (%s) starts at %s after the last layer",
				 i, s->name, layer_name(s->first));
			return -1;
		}
		if (s->first != next) {
			snprintf(err, errlen, "stage %zu (%s) starts at %s (expected %s)", i,
				 s->name, layer_name(s->first), layer_name(next));
			return -1;
		}
		if ((s->last - s->first) * step < 0 || s->last < 0 || s->last >= CNN_LAYERS) {
			snprintf(err, errlen, "stage %zu (%s) runs from %s to %s (expected %s order)",
				 i, s->name, layer_name(s->first), layer_name(s->last),
				 backward ? "backward" : "forward");
			return -1;
		}
		next = s->last + step;
	}
	if (next != end) {
		snprintf(err, errlen, "no stage does %s (the stages end before it)",
			 layer_name(next));
		return -1;
	}
	return 0;
}

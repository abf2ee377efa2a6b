/* fxc's MXNet extension: a partitioner named "fxc" and the subgraph op "_fxc_subgraph" that runs what it selects.
 *
 * Built by fxc/capture/mxnet/extension.py with g++ from this file and the mxnet wheel's src/lib_api.cc, and loaded with
 * mx.library.load. fxc itself (Python) decides and compiles, through two callbacks that mxnet_ext.py installs with
 * fxc_mx_set_callbacks:
 *   supported(graph_json, ids, n)  fills ids[i] with -1 (fxc compiles node i) or -2 (MXNet keeps it); graph_json
 *                                  lists the nodes in the partitioner's index order with their attributes
 *   review(subgraph_json, n, names, data, shapes, ndims, dtypes, out, out_len)
 *                                  the values optimize_for was given for a subgraph's inputs: fxc copies those
 *                                  that are weights and answers a token for them
 *   compile(subgraph_json, shapes_json, types_json, token, out, out_len)
 *                                  compiles one selected subgraph for its input shapes and dtypes (the token's
 *                                  weights baked in), writes it as an fxc deploy artifact, and puts the folder it
 *                                  extracted it to and the inputs it takes in `out` (or the error, returning
 *                                  nonzero)
 * The subgraph op then runs the artifact's library through its plain C entry points (fxc_init, fxc_main), each
 * subgraph in a library of its own (dlopen RTLD_LOCAL): a forward call never enters Python.
 */
#include <dlfcn.h>

#include <sstream>
#include <string>
#include <unordered_map>
#include <vector>

#include "mxnet/lib_api.h"

using mxnet::ext::CustomStatefulOp;
using mxnet::ext::Graph;
using mxnet::ext::MXContext;
using mxnet::ext::MXReturnValue;
using mxnet::ext::MXTensor;
using mxnet::ext::MX_FAIL;
using mxnet::ext::MX_SUCCESS;
using mxnet::ext::Node;
using mxnet::ext::OpResource;

typedef int (*supported_cb_t)(const char *graph_json, int *ids, int n);
typedef int (*review_cb_t)(const char *subgraph_json, int n, const char *const *names, void *const *data,
                           const int64_t *const *shapes, const int *ndims, const int *dtypes, char *out, int out_len);
typedef int (*compile_cb_t)(const char *subgraph_json, const char *shapes_json, const char *types_json,
                            const char *params_token, char *out, int out_len);

static supported_cb_t supported_cb = nullptr;
static review_cb_t review_cb = nullptr;
static compile_cb_t compile_cb = nullptr;

extern "C" void fxc_mx_set_callbacks(supported_cb_t supported, review_cb_t review, compile_cb_t compile) {
  supported_cb = supported;
  review_cb = review;
  compile_cb = compile;
}

static std::string quoted(const std::string &s) {
  std::ostringstream o;
  o << '"';
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      o << '\\' << c;
    } else if (c < 0x20) {
      static const char hex[] = "0123456789abcdef";
      o << "\\u00" << hex[c >> 4] << hex[c & 15];
    } else {
      o << c;
    }
  }
  o << '"';
  return o.str();
}

/* The nodes in the partitioner's index order (getNode(i) is ids[i]): op, name, attrs, inputs as [index, entry]. */
static std::string graph_json(const Graph *g) {
  std::unordered_map<const Node *, size_t> index;
  for (size_t i = 0; i < g->size(); i++) index[g->getNode(i)] = i;
  std::ostringstream o;
  o << "{\"nodes\":[";
  for (size_t i = 0; i < g->size(); i++) {
    const Node *n = g->getNode(i);
    o << (i ? "," : "") << "{\"op\":" << quoted(n->op) << ",\"name\":" << quoted(n->name) << ",\"attrs\":{";
    bool first = true;
    for (const auto &kv : n->attrs) {
      o << (first ? "" : ",") << quoted(kv.first) << ":" << quoted(kv.second);
      first = false;
    }
    o << "},\"inputs\":[";
    for (size_t j = 0; j < n->inputs.size(); j++)
      o << (j ? "," : "") << "[" << index[n->inputs[j].node] << "," << n->inputs[j].entry << "]";
    o << "]}";
  }
  o << "]}";
  return o.str();
}

static MXReturnValue supported_ops(const Graph *graph, std::vector<int> *ids,
                                   const std::unordered_map<std::string, std::string> &options) {
  if (!supported_cb) {
    MX_ERROR_MSG << "fxc: the partitioner was loaded without fxc (import fxc.mxnet instead of mx.library.load)";
    return MX_FAIL;
  }
  std::string json = graph_json(graph);
  if (supported_cb(json.c_str(), ids->data(), static_cast<int>(ids->size())) != 0) {
    MX_ERROR_MSG << "fxc: selecting the ops fxc supports failed (see the Python error above)";
    return MX_FAIL;
  }
  return MX_SUCCESS;
}

/* Accepts every subgraph; hands the values of its inputs that MXNet knows (the args and aux given to optimize_for)
 * to fxc, which keeps those that are weights to bake into the compiled subgraph (unless the option freeze=False),
 * and records fxc's token for them in the subgraph's attribute fxc_params. */
static MXReturnValue review_subgraph(const Graph *subgraph, int subgraph_id, bool *accept,
                                     const std::unordered_map<std::string, std::string> &options,
                                     std::unordered_map<std::string, std::string> *attrs) {
  *accept = true;
  auto freeze = options.find("freeze");
  if (!review_cb || (freeze != options.end() && (freeze->second == "False" || freeze->second == "0")))
    return MX_SUCCESS;
  std::vector<const char *> names;
  std::vector<void *> data;
  std::vector<const int64_t *> shapes;
  std::vector<int> ndims, dtypes;
  for (const Node *n : subgraph->inputs) {
    if (!n->tensor || !n->tensor->data_ptr) continue;
    names.push_back(n->name.c_str());
    data.push_back(n->tensor->data_ptr);
    shapes.push_back(n->tensor->shape.data());
    ndims.push_back(static_cast<int>(n->tensor->shape.size()));
    dtypes.push_back(static_cast<int>(n->tensor->dtype));
  }
  if (names.empty()) return MX_SUCCESS;
  std::string json = subgraph->toString();
  std::vector<char> out(256, 0);
  if (review_cb(json.c_str(), static_cast<int>(names.size()), names.data(), data.data(), shapes.data(),
                ndims.data(), dtypes.data(), out.data(), static_cast<int>(out.size())) != 0) {
    MX_ERROR_MSG << "fxc: reading the subgraph's weights failed: " << out.data();
    return MX_FAIL;
  }
  if (out[0]) (*attrs)["fxc_params"] = out.data();
  return MX_SUCCESS;
}

class FxcSubgraph : public CustomStatefulOp {
 public:
  FxcSubgraph(int (*main)(const void **, void **), void (*release)(void), const char *(*last_error)(void),
              std::vector<int> used)
      : main_(main), release_(release), last_error_(last_error), used_(used) {}

  // The library stays loaded: its thread pool's workers may still be parked in its code (dlclose would unmap it
  // under them); fxc_free releases the params.
  ~FxcSubgraph() override {
    if (release_) release_();
  }

  MXReturnValue Forward(std::vector<MXTensor> *inputs, std::vector<MXTensor> *outputs,
                        const OpResource &res) override {
    std::vector<const void *> ins;
    std::vector<void *> outs;
    for (int i : used_) ins.push_back((*inputs)[i].data_ptr);
    for (auto &t : *outputs) outs.push_back(t.data_ptr);
    int rc = main_(ins.data(), outs.data());
    if (rc != 0) {
      MX_ERROR_MSG << "fxc subgraph failed (code " << rc << "): " << (last_error_ ? last_error_() : "");
      return MX_FAIL;
    }
    return MX_SUCCESS;
  }

 private:
  int (*main_)(const void **, void **);
  void (*release_)(void);
  const char *(*last_error_)(void);
  std::vector<int> used_;       // the inputs fxc_main takes (the others are weights baked into the library)
};

static MXReturnValue create_op_state(const std::unordered_map<std::string, std::string> &attrs,
                                     const MXContext &ctx, const std::vector<std::vector<unsigned int>> &in_shapes,
                                     const std::vector<int> in_types, CustomStatefulOp **op_inst) {
  if (!compile_cb) {
    MX_ERROR_MSG << "fxc: the subgraph op was loaded without fxc (import fxc.mxnet)";
    return MX_FAIL;
  }
  auto sym = attrs.find(MX_STR_SUBGRAPH_SYM_JSON);
  if (sym == attrs.end()) {
    MX_ERROR_MSG << "fxc: the subgraph op has no subgraph";
    return MX_FAIL;
  }
  std::ostringstream shapes, types;
  shapes << "[";
  types << "[";
  for (size_t i = 0; i < in_shapes.size(); i++) {
    shapes << (i ? ",[" : "[");
    for (size_t j = 0; j < in_shapes[i].size(); j++) shapes << (j ? "," : "") << in_shapes[i][j];
    shapes << "]";
    types << (i ? "," : "") << (i < in_types.size() ? in_types[i] : -1);
  }
  shapes << "]";
  types << "]";
  auto token = attrs.find("fxc_params");
  std::vector<char> out(8192, 0);
  if (compile_cb(sym->second.c_str(), shapes.str().c_str(), types.str().c_str(),
                 token == attrs.end() ? "" : token->second.c_str(), out.data(), static_cast<int>(out.size())) != 0) {
    MX_ERROR_MSG << "fxc could not compile a subgraph: " << out.data();
    return MX_FAIL;
  }
  // fxc's answer: the artifact's folder, a newline, the indices of the inputs fxc_main takes ("0,3")
  std::string answer(out.data());
  size_t newline = answer.find('\n');
  std::string dir = answer.substr(0, newline);
  std::vector<int> used;
  std::istringstream list(newline == std::string::npos ? "" : answer.substr(newline + 1));
  for (std::string item; std::getline(list, item, ',');)
    if (!item.empty()) used.push_back(std::stoi(item));
  void *lib = dlopen((dir + "/libfxc_model.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    MX_ERROR_MSG << "fxc: cannot load the compiled subgraph: " << dlerror();
    return MX_FAIL;
  }
  auto init = reinterpret_cast<int (*)(const char *)>(dlsym(lib, "fxc_init"));
  auto main = reinterpret_cast<int (*)(const void **, void **)>(dlsym(lib, "fxc_main"));
  auto release = reinterpret_cast<void (*)(void)>(dlsym(lib, "fxc_free"));
  auto last_error = reinterpret_cast<const char *(*)(void)>(dlsym(lib, "fxc_last_error"));
  if (!init || !main || init(dir.c_str()) != 0) {
    MX_ERROR_MSG << "fxc: the compiled subgraph in " << dir << " did not initialise: "
                 << (last_error ? last_error() : "no fxc entry points");
    dlclose(lib);
    return MX_FAIL;
  }
  *op_inst = CustomStatefulOp::create<FxcSubgraph>(main, release, last_error, used);
  return MX_SUCCESS;
}

REGISTER_OP(_fxc_subgraph)
.setIsSubgraphOp()
.setCreateOpState(create_op_state, "cpu");

REGISTER_PARTITIONER(fxc)
.addStrategy("fxc", "_fxc_subgraph")
.setSupportedOps("fxc", supported_ops)
.setReviewSubgraph("fxc", review_subgraph);

MXReturnValue initialize(int version) {
  if (version < 10700) {
    MX_ERROR_MSG << "fxc's MXNet extension needs MXNet 1.7 or newer (this is " << version << ")";
    return MX_FAIL;
  }
  return MX_SUCCESS;
}

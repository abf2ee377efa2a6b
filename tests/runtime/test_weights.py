"""The weight state (fxc/runtime/weights.py) that every module asks whether its held weights are still the call's:
the caller's token decides first (same objects, versions and addresses), then the fingerprint of sampled words
(a write the version counter missed); a Sample does the same for weights read through copies."""
import numpy as np

from fxc.runtime.weights import FINGERPRINT_WORDS, HeldWeights, Sample, Weights, same_token, token_of


def test_fingerprint_sees_a_write_to_a_sampled_word_only():
    w = np.arange(64, dtype=np.float32)
    x = np.zeros(3, np.float32)
    weights = Weights([1], [w.nbytes])
    assert weights.n == FINGERPRINT_WORDS
    before = weights.fingerprint([x.ctypes.data, w.ctypes.data])
    w[1] = -1.0                     # between the sampled words (0, 21, 42, 63): unseen, as documented
    assert weights.fingerprint([x.ctypes.data, w.ctypes.data]) == before
    w[63] = -1.0                    # the last word is sampled
    assert weights.fingerprint([x.ctypes.data, w.ctypes.data]) != before
    assert Weights([], []).fingerprint([x.ctypes.data]) is None
    assert Weights([0], [x.nbytes], fn=None).fingerprint([x.ctypes.data]) is None


def test_held_weights_follow_the_token_then_the_fingerprint():
    a, b = object(), object()
    token = token_of([16, 32], ((a, b), (0, 3)))
    held = HeldWeights()
    assert not held.holds(token, 7)                         # nothing held yet
    held.hold(token, 7)
    assert held.holds(token, 7)                             # the very token object
    assert held.holds(token_of([16, 32], ((a, b), (0, 3))), 7)      # an equal one: same objects
    assert not held.holds(token_of([16, 32], ((a, b), (0, 4))), 7)  # a new version (an optimizer step)
    assert not held.holds(token_of([16, 48], ((a, b), (0, 3))), 7)  # a new address (p.data = t)
    assert not held.holds(token_of([16, 32], ((a, object()), (0, 3))), 7)    # another object
    assert not held.holds(token, 8)                         # a write through .data
    assert not held.holds(None, 7) and token_of([16], None) is None    # no token: changed
    held.drop()
    assert not held.holds(token, 7)
    assert not same_token(None, token) and same_token(token, token)


def test_sample_of_a_strided_view_sees_a_write_through_it():
    base = np.arange(48, dtype=np.float32).reshape(4, 12)
    view = base.T                   # not contiguous: strides (1, 12) elements
    s = Sample([(view.ctypes.data, view.shape, tuple(st // 4 for st in view.strides), 4)])
    assert s.n == FINGERPRINT_WORDS and s.unchanged()
    base[3, 11] = 100.0             # the view's last element: sampled
    assert not s.unchanged()
    assert Weights([0], [4], fn=None).sample([]) is None

# The showcase of post-optimization AD (DESIGN 4 and 5) on examples/norm.py: with opt=post the gradient
# is built from the program in which mag(x, n) was hoisted out of norm's loop and then inlined there, so
# mag's loop and its reverse run once: O(n). With opt=pre it is built from the program as written: mag's
# loop, and its reverse, run inside norm's loop and its reverse: O(n^2), with mag's result taped per i.
# RUN: isozyme ir %S/../../../examples/norm.py:norm --stage grad-opt --activity dup,dup,const -O post | filecheck %s --check-prefix=POST
# RUN: isozyme ir %S/../../../examples/norm.py:norm --stage grad-opt --activity dup,dup,const -O pre | filecheck %s --check-prefix=PRE

# POST-LABEL: func @diffe_norm(%out: f64[?], %d_out: f64[?], %x: f64[?], %d_x: f64[?], %n: i64)
# POST-NOT:     alloc
# POST:       {{^}}mag.for.header:
# POST:       {{^}}mag.for.end:
# POST:         %[[MAG:[a-z0-9_.]+]] = sqrt
# POST-NEXT:    br for.header
# POST:       {{^}}for.body:
# POST-NOT:     mag.
# POST:         fdiv %{{[a-z0-9_.]+}}, %[[MAG]]
# POST:       {{^}}for.header.rev:
# POST-NOT:     mag.for.header.rev
# POST:         %for.header.rev.index = isub
# POST:         cbr %{{[a-z0-9_.]+}}, mag.for.end.rev, for.body.rev
# POST:       {{^}}mag.for.end.rev:
# POST:       {{^}}mag.for.header.rev:
# POST:         cbr %{{[a-z0-9_.]+}}, exit, mag.for.header.rev.mag.for.body

# PRE-LABEL: func @diffe_norm(%out: f64[?], %d_out: f64[?], %x: f64[?], %d_x: f64[?], %n: i64)
# PRE:         %tape.v = alloc f64[%trip]
# PRE:       {{^}}for.body:
# PRE:       {{^}}mag.for.header:
# PRE:       {{^}}mag.for.end:
# PRE:         %[[MAG:[a-z0-9_.]+]] = sqrt
# PRE:         store %[[MAG]], %tape.v[%i]
# PRE:       {{^}}mag.exit.rev:
# PRE:         load %tape.v[%for.header.rev.index]
# PRE:       {{^}}mag.for.header.rev:
# PRE:         cbr %{{[a-z0-9_.]+}}, for.body.rev, mag.for.header.rev.mag.for.latch
# PRE:       {{^}}for.body.rev:
# PRE:         br for.header.rev
# PRE:       {{^}}for.header.rev:
# PRE:         cbr %{{[a-z0-9_.]+}}, exit, mag.exit.rev

# Paired HEAD/1077a2c answers-a-second ratio at 256 callers, pooled over
# sittings: python3 xproc-pooled-2026-12-05.py xp12 xp13 (directories under
# /work/notes, as written by xproc-paired-2026-12-04c.sh). Reuses load and
# ci of xproc-paired-2026-12-04c.py.
import os,sys
here=os.path.dirname(os.path.abspath(__file__))
src=open(os.path.join(here,'xproc-paired-2026-12-04c.py')).read()
ns={}
exec(src.split("if len(sys.argv)>1")[0],ns)
rs=[r for d in sys.argv[1:] for r in ns['load'](d)]
for k in ('rate','cpu'):
    a=[r['main0'][256][k] for r in rs]; b=[r['head'][256][k] for r in rs]
    m,lo,hi=ns['ci']([y/x for x,y in zip(a,b)])
    print('%s: %d rounds, 256 %s HEAD/1077a2c %.3f [%.3f, %.3f]'%('+'.join(sys.argv[1:]),len(rs),k,m,lo,hi))

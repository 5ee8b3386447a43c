(function(){
  var f=document.getElementById('qfilter'), st=document.getElementById('qstyle'),
      ss=document.getElementById('qstate'), c=document.getElementById('qcount');
  if(!f) return;
  var rows=Array.prototype.slice.call(document.querySelectorAll('#queries-table tbody tr'));
  function apply(){
    var t=f.value.toLowerCase(), s=st.value, x=ss.value, n=0;
    rows.forEach(function(r){
      var ok=(!s||r.dataset.style===s)&&(!x||r.dataset.state===x)&&(!t||r.textContent.toLowerCase().indexOf(t)>=0);
      r.style.display=ok?'':'none'; if(ok) n++;
    });
    c.textContent=n+' of '+rows.length+' queries';
  }
  f.addEventListener('input',apply); st.addEventListener('change',apply); ss.addEventListener('change',apply);
})();
(function(){
  /* Click a column header to sort; again to reverse. Cells sort by data-v (numbers; empty = last) or text. */
  Array.prototype.forEach.call(document.querySelectorAll('table.sortable'), function(t){
    Array.prototype.forEach.call(t.tHead.rows[0].cells, function(th, i){
      th.classList.add('sorter');
      th.addEventListener('click', function(){
        var dir = (t.dataset.sortcol === String(i)) ? (t.dataset.sortdir === 'asc' ? 'desc' : 'asc') : (th.dataset.sort || 'asc');
        t.dataset.sortcol = i; t.dataset.sortdir = dir;
        var body = t.tBodies[0], rows = Array.prototype.slice.call(body.rows);
        function key(r){ var c = r.cells[i]; if(!c) return null;
          if(c.dataset.v !== undefined) return c.dataset.v === '' ? null : parseFloat(c.dataset.v);
          return c.textContent.toLowerCase(); }
        rows.sort(function(a, b){ var x = key(a), y = key(b);
          if(x === null || y === null) return (x === null) - (y === null);
          var r = x < y ? -1 : x > y ? 1 : 0; return dir === 'asc' ? r : -r; });
        rows.forEach(function(r){ body.appendChild(r); });
      });
    });
  });
})();

# Enums of the plan schema (runtime/schema/plan.proto) read at configure
# time, so that the lists the dialects and the kernels need are generated
# from the schema instead of kept beside it. Reconfigures when it changes.
set(MT_PLAN_PROTO ${CMAKE_SOURCE_DIR}/runtime/schema/plan.proto)

# mt_proto_enum(ENUM PREFIX OUT): OUT is the list of "Camel;keyword;number"
# triples (joined by "|") of plan.proto's `enum ENUM`, its zero value left
# out and PREFIX stripped from each name: FN_LEAKY_RELU = 12 with PREFIX FN_
# is "LeakyRelu|leaky_relu|12".
function(mt_proto_enum enum prefix out)
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
    ${MT_PLAN_PROTO})
  file(READ ${MT_PLAN_PROTO} proto)
  string(REGEX MATCH "\nenum ${enum} {[^}]*}" body "${proto}")
  string(REGEX MATCHALL "\n  [A-Z0-9_]+ = [0-9]+" cases "${body}")
  set(values "")
  foreach(case IN LISTS cases)
    string(REGEX MATCH "([A-Z0-9_]+) = ([0-9]+)" matched "${case}")
    set(name ${CMAKE_MATCH_1})
    set(number ${CMAKE_MATCH_2})
    if(number EQUAL 0)
      continue() # the UNSPECIFIED value
    endif()
    if(prefix)
      string(REGEX REPLACE "^${prefix}" "" name ${name})
    endif()
    string(TOLOWER ${name} keyword)
    string(REPLACE "_" ";" words ${keyword})
    set(camel "")
    foreach(word IN LISTS words)
      string(SUBSTRING ${word} 0 1 first)
      string(TOUPPER ${first} first)
      string(SUBSTRING ${word} 1 -1 rest)
      string(APPEND camel ${first}${rest})
    endforeach()
    list(APPEND values "${camel}|${keyword}|${number}")
  endforeach()
  list(LENGTH values count)
  if(count LESS 1)
    message(FATAL_ERROR "no values read from ${MT_PLAN_PROTO}'s enum ${enum}")
  endif()
  set(${out} ${values} PARENT_SCOPE)
endfunction()

# mt_proto_enum_td(ENUM PREFIX DIALECT TDNAME CPPNS FILE): writes FILE, an
# I32EnumAttr named TDNAME (C++ enum ENUM in CPPNS) of the enum's values.
function(mt_proto_enum_td enum prefix tdname cppns file)
  mt_proto_enum(${enum} "${prefix}" values)
  set(cases "")
  foreach(value IN LISTS values)
    string(REPLACE "|" ";" parts "${value}")
    list(GET parts 0 camel)
    list(GET parts 1 keyword)
    list(GET parts 2 number)
    list(APPEND cases "    I32EnumAttrCase<\"${camel}\", ${number}, \"${keyword}\">")
  endforeach()
  list(JOIN cases ",\n" cases)
  file(CONFIGURE OUTPUT ${file} CONTENT
"// Generated from runtime/schema/plan.proto's enum ${enum} by cmake/ProtoEnum.cmake.
def ${tdname} : I32EnumAttr<\"${enum}\", \"plan.proto's ${enum}\", [
${cases}]> {
  let cppNamespace = \"${cppns}\";
  let genSpecializedAttr = 0;
}
" @ONLY)
endfunction()
